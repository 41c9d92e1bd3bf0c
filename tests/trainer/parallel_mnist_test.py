"""Model and dual parallelism end to end on the bundled Fashion-MNIST:
examples/train_mnist_model_parallel (2 processes) gives the same per-batch
losses over 100 steps as examples/train_mnist in one process with the same
seed, under tracker/launch.py and under mpirun; train_mnist_dual_parallel
with 4 processes (2 shards x 2 replicas) equals model parallelism with the
double batch; wrong process counts are one clear error on every rank."""

import os
import shutil
import subprocess
import tempfile
import unittest

from tracker import jobkey
from tracker.launch_testlib import launch
from tracker.testbed import free_port
from tools import pyunit

TRAIN = os.path.abspath("examples/train_mnist")
MODEL = os.path.abspath("examples/train_mnist_model_parallel")
DUAL = os.path.abspath("examples/train_mnist_dual_parallel")
CKPT = os.path.abspath("tools/kvtrain_checkpoint")
DATA = "/usr/share/datasets/fashion-mnist"
# Loaded CI machines must not look like dead peers.
JOB_ENV = ["--env", "PS_HEARTBEAT_TIMEOUT=60", "--env", "KVTRAIN_STARTUP_TIMEOUT=120"]
# 10000 examples in batches of 100: one epoch is 100 steps.
COMMON = ["--num-examples=10000", "--num-epochs=1", "--seed=3", "--disp-batches=0",
          "--lr-step-epochs="]


def losses(path):
    with open(path) as f:
        return [float(line) for line in f]


def max_rel_diff(a, b):
    return max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b))



def mpirun(n, argv, timeout=300):
    """Runs `argv` as `n` ranks of one mpirun (rank 0 serves the rendezvous)."""
    session = tempfile.mkdtemp(prefix="kvtrain-ompi-")
    env = dict(os.environ, KVTRAIN_RENDEZVOUS="127.0.0.1:%d" % free_port(),
               PS_HEARTBEAT_TIMEOUT="60", KVTRAIN_STARTUP_TIMEOUT="120",
               KVTRAIN_JOB_KEY=jobkey.new_secret_key())
    try:
        r = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe",
                            "--mca", "orte_tmpdir_base", session, "-x", "KVTRAIN_RENDEZVOUS",
                            "-x", "KVTRAIN_JOB_KEY",
                            "-x", "PS_HEARTBEAT_TIMEOUT", "-x", "KVTRAIN_STARTUP_TIMEOUT",
                            "-n", str(n)] + argv, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                           timeout=timeout, env=env)
        return r.returncode, r.stdout
    finally:
        shutil.rmtree(session, ignore_errors=True)


@unittest.skipUnless(os.path.isdir(DATA), "Fashion-MNIST is not installed (tools/setup.sh)")
class ParallelMnistTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvtrain-parallel-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def single_process_losses(self):
        path = self.tmp + "/single.loss"
        r = subprocess.run([TRAIN, "--kv-store=local", "--batch-size=100",
                            "--loss-file=" + path] + COMMON,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = losses(path)
        self.assertEqual(len(got), 100)
        return got

    def check_equal(self, single, parallel, what):
        self.assertEqual(len(parallel), 100, what)
        diff = max_rel_diff(single, parallel)
        print("%s, 100 steps: max relative loss difference %.3g" % (what, diff))
        self.assertLessEqual(diff, 1e-5, what)

    def test_model_parallel_losses_equal_one_process(self):
        single = self.single_process_losses()
        path = self.tmp + "/model.loss"
        code, out = launch(["-n", "2", "-s", "0"] + JOB_ENV + [
            MODEL, "--batch-size=100", "--loss-file=" + path] + COMMON, timeout=300)
        self.assertEqual(code, 0, out)
        self.assertIn("[worker 0] Test accuracy=", out)
        self.assertNotIn("[worker 1] Test accuracy=", out)  # only rank 0 reports
        self.check_equal(single, losses(path), "model parallel (launch.py) vs one process")

    @unittest.skipUnless(shutil.which("mpirun"), "mpirun is not installed")
    def test_model_parallel_under_mpirun_losses_equal_one_process(self):
        single = self.single_process_losses()
        path = self.tmp + "/mpi.loss"
        code, out = mpirun(2, [MODEL, "--batch-size=100", "--loss-file=" + path] + COMMON)
        self.assertEqual(code, 0, out)
        self.check_equal(single, losses(path), "model parallel (mpirun) vs one process")

    def test_dual_equals_model_parallel_with_double_batch(self):
        code, out = launch(["-n", "2", "-s", "0"] + JOB_ENV + [
            MODEL, "--batch-size=100", "--loss-file=%s/model.loss" % self.tmp,
            "--model-prefix=%s/model" % self.tmp] + COMMON, timeout=300)
        self.assertEqual(code, 0, out)
        code, out = launch(["-n", "4", "-s", "0"] + JOB_ENV + [
            DUAL, "--batch-size=50", "--loss-file=%s/dual.loss" % self.tmp,
            "--model-prefix=%s/dual" % self.tmp] + COMMON, timeout=300)
        self.assertEqual(code, 0, out)
        # Each shard's weights (saved by its replica 0) equal model parallel's.
        for shard in (0, 1):
            r = subprocess.run([CKPT, "diff", "%s/model-shard%d-0001.params" % (self.tmp, shard),
                                "%s/dual-shard%d-0001.params" % (self.tmp, shard),
                                "--rtol=1e-4", "--atol=1e-5"], capture_output=True, text=True)
            print(r.stdout)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # The double batch's loss is the mean of the two halves'.
        halves = [losses("%s/dual.loss.replica%d" % (self.tmp, k)) for k in (0, 1)]
        mean = [(a + b) / 2 for a, b in zip(*halves)]
        self.check_equal(losses(self.tmp + "/model.loss"), mean,
                         "dual 2x2 (mean of the replicas) vs model parallel with the double batch")

    def test_wrong_process_counts_are_one_clear_error(self):
        code, out = launch(["-n", "3", "-s", "0"] + JOB_ENV + [MODEL] + COMMON, timeout=120)
        self.assertEqual(code, 2, out)
        self.assertIn("this example needs exactly 2 processes, got 3", out)
        code, out = launch(["-n", "3", "-s", "0"] + JOB_ENV + [DUAL] + COMMON, timeout=120)
        self.assertEqual(code, 2, out)
        self.assertIn("this example needs an even number of processes (2 model shards x "
                      "N/2 data replicas), got 3", out)

    @unittest.skipUnless(shutil.which("mpirun"), "mpirun is not installed")
    def test_wrong_process_count_under_mpirun_stops_every_rank(self):
        code, out = mpirun(3, [MODEL] + COMMON, timeout=120)
        self.assertNotEqual(code, 0, out)
        # Every rank sees the size and stops (mpirun may stop the last ones
        # before they print); none waits for the others.
        self.assertGreaterEqual(out.count("this example needs exactly 2 processes, got 3"), 1, out)


if __name__ == "__main__":
    pyunit.main()
