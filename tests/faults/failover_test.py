"""SIGKILL servers of a dist_sync MLP job started by tracker/launch.py with
--server-replicas: the job goes on without restarting anything and ends with
the weights and optimizer states of a run that lost nothing, bit for bit.

2 workers and 3 servers; killed in the middle of epoch 2, when epoch 1's
checkpoint appears (the servers' optimizer states being gathered), and two
servers one after the other with two replicas. Both copies of a key range
gone: the job ends, naming the dead servers. The pause each death causes is
printed (bench/dist_train_bench.py measures what replication costs)."""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from tracker.launch_testlib import kill_marked, launch, new_marker, node_pid, read_until
from tracker.launch_testlib import start_launch, wait_no_processes
from tools import pyunit

TRAIN = os.path.abspath("examples/train_mnist")
DATA = "/usr/share/datasets/fashion-mnist"
EPOCHS = 4
COMMON = ["--disp-batches=20", "--kv-store=dist_sync", "--network=mlp",
          "--num-examples=6000", "--batch-size=50", "--seed=5", "--lr-step-epochs=2",
          "--num-epochs=%d" % EPOCHS]


def job(replicas):
    return ["-n", "2", "-s", "3", "--server-replicas", str(replicas),
            "--env", "KVTRAIN_STARTUP_TIMEOUT=120"]


def final_files(prefix):
    with open("%s-%04d.params" % (prefix, EPOCHS), "rb") as p, \
            open("%s-%04d.states" % (prefix, EPOCHS), "rb") as s:
        return p.read(), s.read()


@unittest.skipUnless(os.path.isdir(DATA), "Fashion-MNIST is not installed (tools/setup.sh)")
class FailoverTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvtrain-failover-")
        # Without replicas: the reference every other run must equal.
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

    def run_job(self, replicas, kills):
        """Runs a job, killing at each (output text or "file:" checkpoint
        suffix, server rank) in turn; returns (exit code, output, model prefix)."""
        marker = new_marker()
        d = os.path.join(self.tmp, marker)  # the marker is in every process's argv
        os.makedirs(d)
        prefix = d + "/run"
        p = start_launch(job(replicas) + [TRAIN] + COMMON + ["--model-prefix=" + prefix])
        out = ""
        try:
            for when, rank in kills:
                if when.startswith("file:"):
                    # Epoch end: the checkpoint's weights are written, then
                    # the servers' optimizer states are gathered.
                    path = prefix + when[len("file:"):]
                    end = time.monotonic() + 300
                    while not os.path.exists(path) and time.monotonic() < end \
                            and p.poll() is None:
                        time.sleep(0.005)
                    self.assertTrue(os.path.exists(path), out)
                else:
                    out += read_until(p, when, timeout=300)
                pid = node_pid(marker, "server", rank, program="train_mnist")
                self.assertIsNotNone(pid, "server %d not found" % rank)
                os.kill(pid, signal.SIGKILL)
            rest, _ = p.communicate(timeout=300)
            out += rest
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        left = wait_no_processes(marker, timeout=15)
        kill_marked(marker)
        self.assertEqual(left, [], "left running: %s" % left)
        for pause in re.findall(r"resumed, answered by .* ([0-9.e-]+) s after the last word", out):
            print("pause after a server's death: %s s" % pause)
        return p.returncode, out, prefix

    def assert_went_on(self, out, rank):
        self.assertIn("server %d failed with signal SIGKILL; the job goes on without it" % rank,
                      out)
        self.assertRegex(out, r"server %d \([^)]*\) is dead: .*; the job goes on" % rank)
        self.assertIn("resumed, answered by", out)

    def test_replicas_change_nothing(self):
        code, out, prefix = self.run_job(1, [])
        self.assertEqual(code, 0, out)
        self.assert_same_result(prefix, out)

    def test_kill_a_server_mid_epoch(self):
        code, out, prefix = self.run_job(1, [("Epoch[1] Batch[40]", 1)])
        self.assertEqual(code, 0, out)
        self.assert_went_on(out, 1)
        self.assertRegex(out, r"key range 1 to server 2")
        # The epoch's line (and metrics log) counts the loss, on each worker.
        self.assertEqual(len(re.findall(r"Epoch\[1\] Train-.* servers-lost=1\.0* "
                                        r"failover-pause-seconds=[0-9.]+", out)), 2, out)
        self.assert_same_result(prefix, out)

    def test_kill_a_server_at_a_checkpoint(self):
        code, out, prefix = self.run_job(1, [("file:-0001.params", 2)])
        self.assertEqual(code, 0, out)
        self.assert_went_on(out, 2)
        self.assert_same_result(prefix, out)

    def test_kill_two_servers_with_two_replicas(self):
        code, out, prefix = self.run_job(2, [("Epoch[1] Batch[20]", 0),
                                             ("Epoch[2] Batch[20]", 2)])
        self.assertEqual(code, 0, out)
        self.assert_went_on(out, 0)
        self.assert_went_on(out, 2)
        self.assert_same_result(prefix, out)

    def test_a_range_without_a_copy_ends_the_job(self):
        code, out, _ = self.run_job(1, [("Epoch[1] Batch[20]", 1),
                                        ("Epoch[2] Batch[20]", 2)])
        self.assertNotEqual(code, 0, out)
        self.assert_went_on(out, 1)
        self.assertIn("server 2 failed with signal SIGKILL; stopped every other process", out)


if __name__ == "__main__":
    pyunit.main()
