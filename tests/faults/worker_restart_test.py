"""SIGKILL workers of a dist_sync MLP job started by tracker/launch.py with
--max-restarts: the launcher starts each again, it rejoins the running job at
the step the servers are at, with its data where the dead one's was, and the
job ends with the weights and optimizer states of a run that lost nothing,
bit for bit.

2 workers and 2 servers; worker 1 killed in the middle of epoch 2, worker 0
(which initialises the keys and writes the checkpoints) too, and worker 0
again when epoch 1's checkpoint appears. Restarts used up: the job ends,
naming the worker."""

import os
import shutil
import signal
import tempfile
import time
import unittest

from tracker.launch_testlib import kill_marked, launch, new_marker, node_pid, read_until
from tracker.launch_testlib import start_launch, wait_no_processes
from tools import pyunit

TRAIN = os.path.abspath("examples/train_mnist")
DATA = "/usr/share/datasets/fashion-mnist"
EPOCHS = 3
COMMON = ["--disp-batches=20", "--kv-store=dist_sync", "--network=mlp",
          "--num-examples=6000", "--batch-size=50", "--seed=5", "--lr-step-epochs=2",
          "--num-epochs=%d" % EPOCHS]


def job(restarts):
    return ["-n", "2", "-s", "2", "--max-restarts", str(restarts),
            "--env", "KVTRAIN_STARTUP_TIMEOUT=120"]


def final_files(prefix):
    with open("%s-%04d.params" % (prefix, EPOCHS), "rb") as p, \
            open("%s-%04d.states" % (prefix, EPOCHS), "rb") as s:
        return p.read(), s.read()


@unittest.skipUnless(os.path.isdir(DATA), "Fashion-MNIST is not installed (tools/setup.sh)")
class WorkerRestartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvtrain-restart-")
        # Nothing restarted: the reference every other run must equal.
        code, out = launch(job(0) + [TRAIN] + COMMON + ["--model-prefix=%s/plain" % cls.tmp],
                           timeout=600)
        assert code == 0, out
        cls.reference = final_files(cls.tmp + "/plain")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assert_same_result(self, prefix, out):
        params, states = final_files(prefix)
        self.assertEqual(params, self.reference[0], "the final weights differ\n" + out)
        self.assertEqual(states, self.reference[1], "the servers' optimizer states differ")

    def run_job(self, restarts, kills):
        """Runs a job, killing the worker of each (output text or "file:"
        checkpoint suffix, worker rank, whether it comes back) in turn once
        it shows; returns (exit code, output, model prefix)."""
        marker = new_marker()
        d = os.path.join(self.tmp, marker)  # the marker is in every process's argv
        os.makedirs(d)
        prefix = d + "/run"
        p = start_launch(job(restarts) + [TRAIN] + COMMON + ["--model-prefix=" + prefix])
        out = ""
        try:
            for when, rank, back in kills:
                if when.startswith("file:"):
                    path = prefix + when[len("file:"):]
                    end = time.monotonic() + 300
                    while not os.path.exists(path) and time.monotonic() < end \
                            and p.poll() is None:
                        time.sleep(0.005)
                    self.assertTrue(os.path.exists(path), out)
                else:
                    out += read_until(p, when, timeout=300)
                pid = node_pid(marker, "worker", rank, program="train_mnist")
                self.assertIsNotNone(pid, "worker %d not found" % rank)
                os.kill(pid, signal.SIGKILL)
                killed = time.monotonic()
                if back:  # the next kill waits for the new process
                    out += read_until(p, "is back (started again", timeout=120)
                    # The pause: until the job's next progress line.
                    out += read_until(p, "Speed:", timeout=120)
                    print("pause after worker %d's death: %.2f s (to the next progress line)"
                          % (rank, time.monotonic() - killed))
            rest, _ = p.communicate(timeout=300)
            out += rest
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        left = wait_no_processes(marker, timeout=15)
        kill_marked(marker)
        self.assertEqual(left, [], "left running: %s" % left)
        return p.returncode, out, prefix

    def assert_came_back(self, out, rank, times=1):
        self.assertIn("worker %d failed with signal SIGKILL; starting it again (restart %d of"
                      % (rank, times), out)
        self.assertRegex(out, r"worker %d \([^)]*\) is dead: .*; the job waits up to" % rank)
        self.assertRegex(out, r"worker %d \([^)]*\) is back \(started again, time %d\)"
                         % (rank, times))
        self.assertRegex(out, r"\[worker %d\] .*started again; the job is at step \d+" % rank)

    def test_kill_worker_1_mid_epoch(self):
        code, out, prefix = self.run_job(1, [("Epoch[1] Batch[40]", 1, True)])
        self.assertEqual(code, 0, out)
        self.assert_came_back(out, 1)
        self.assert_same_result(prefix, out)

    def test_kill_worker_0_mid_epoch_and_at_a_checkpoint(self):
        # Worker 0 initialised the keys and writes every checkpoint; its
        # second life is killed as epoch 2's checkpoint appears.
        code, out, prefix = self.run_job(2, [("Epoch[1] Batch[20]", 0, True),
                                             ("file:-0002.params", 0, True)])
        self.assertEqual(code, 0, out)
        self.assert_came_back(out, 0, 1)
        self.assert_came_back(out, 0, 2)
        self.assert_same_result(prefix, out)

    def test_restarts_used_up_end_the_job(self):
        code, out, _ = self.run_job(1, [("Epoch[1] Batch[20]", 1, True),
                                        ("Epoch[2] Batch[20]", 1, False)])
        self.assertNotEqual(code, 0, out)
        self.assert_came_back(out, 1)
        self.assertIn("worker 1 failed with signal SIGKILL (after 1 restart); "
                      "stopped every other process", out)


if __name__ == "__main__":
    pyunit.main()
