"""A dist_sync train_mnist job under tracker/launch.py whose processes a test
SIGKILLs as it trains, and the job's result against a reference run of the
same job where nothing died (failover_test, worker_restart_test)."""

import os
import shutil
import signal
import tempfile
import time
import unittest

from tracker.launch_testlib import kill_marked, launch, new_marker, node_pid, read_until
from tracker.launch_testlib import start_launch, wait_no_processes

TRAIN = os.path.abspath("examples/train_mnist")
DATA = "/usr/share/datasets/fashion-mnist"


@unittest.skipUnless(os.path.isdir(DATA), "Fashion-MNIST is not installed (tools/setup.sh)")
class TrainJobTest(unittest.TestCase):
    """Subclasses set EPOCHS and job(n), the launcher's arguments for a job
    with n replicas or restarts (0: the reference)."""

    EPOCHS = 4

    @classmethod
    def job(cls, n):
        raise NotImplementedError

    @classmethod
    def train_flags(cls):
        return ["--disp-batches=20", "--kv-store=dist_sync", "--network=mlp",
                "--num-examples=6000", "--batch-size=50", "--seed=5", "--lr-step-epochs=2",
                "--num-epochs=%d" % cls.EPOCHS]

    @classmethod
    def final_files(cls, prefix):
        with open("%s-%04d.params" % (prefix, cls.EPOCHS), "rb") as p, \
                open("%s-%04d.states" % (prefix, cls.EPOCHS), "rb") as s:
            return p.read(), s.read()

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvtrain-faults-")
        # Nothing killed: the reference every other run must equal.
        code, out = launch(cls.job(0) + [TRAIN] + cls.train_flags() +
                           ["--model-prefix=%s/plain" % cls.tmp], timeout=600)
        assert code == 0, out
        cls.reference = cls.final_files(cls.tmp + "/plain")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assert_same_result(self, prefix, out):
        params, states = self.final_files(prefix)
        self.assertEqual(params, self.reference[0], "the final weights differ\n" + out)
        self.assertEqual(states, self.reference[1], "the servers' optimizer states differ")

    def run_job(self, n, kills, role, after_kill=None):
        """Runs job(n), killing the `role` process of each (output text or
        "file:" checkpoint suffix, rank, ...) in turn once it shows; then
        after_kill(popen, kill) returns the output it read, if given.
        Returns (exit code, output, model prefix)."""
        marker = new_marker()
        d = os.path.join(self.tmp, marker)  # the marker is in every process's argv
        os.makedirs(d)
        prefix = d + "/run"
        p = start_launch(self.job(n) + [TRAIN] + self.train_flags() +
                         ["--model-prefix=" + prefix])
        out = ""
        try:
            for kill in kills:
                when, rank = kill[0], kill[1]
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
                pid = node_pid(marker, role, rank, program="train_mnist")
                self.assertIsNotNone(pid, "%s %d not found" % (role, rank))
                os.kill(pid, signal.SIGKILL)
                if after_kill:
                    out += after_kill(p, kill)
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
