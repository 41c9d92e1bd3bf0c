"""examples/train_ctr end to end on a click log written by
tools/make_click_log.py: the wide-and-deep model learns (test AUC well
above chance), dist_sync with 2 workers equals one process with the doubled
batch, dist_async trains, tables save, and bad input is a one-line error."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

from tracker.launch_testlib import launch
from tools import pyunit

TRAIN = os.path.abspath("examples/train_ctr")
GEN = os.path.abspath("tools/make_click_log.py")
PLOT = os.path.abspath("tools/plot_metrics")
JOB_ENV = ["--env", "PS_HEARTBEAT_TIMEOUT=60", "--env", "KVTRAIN_STARTUP_TIMEOUT=120"]


def results(out):
    """(test AUC, test log-loss) of the last epoch line."""
    m = re.findall(r"Validation-auc=([0-9.]+) Validation-log-loss=([0-9.]+)", out)
    return (float(m[-1][0]), float(m[-1][1])) if m else (-1.0, -1.0)


class TrainCtrTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvtrain-ctr-")
        cls.train = os.path.join(cls.tmp, "train.txt")
        cls.test = os.path.join(cls.tmp, "test.txt")
        r = subprocess.run(["/usr/bin/python3", GEN, "--rows", "40000", "--vocab", "2000",
                            "--out", cls.train, "--test-rows", "8000", "--test-out", cls.test],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        cls.best_auc = float(re.findall(r"AUC ([0-9.]+)", r.stderr)[0])

    def run_local(self, *args):
        r = subprocess.run([TRAIN, "--train=" + self.train, "--test=" + self.test,
                            "--optimizer=adam", "--lr=0.01"] + list(args),
                           capture_output=True, text=True, timeout=600)
        return r.returncode, r.stdout, r.stderr

    def test_local_learns(self):
        metrics = os.path.join(self.tmp, "m.jsonl")
        code, out, err = self.run_local("--num-epochs=2", "--metrics-file=" + metrics,
                                        "--model-prefix=" + os.path.join(self.tmp, "m"))
        self.assertEqual(code, 0, err)
        # The metrics log plots, as train_mnist's does.
        r = subprocess.run(["/usr/bin/python3", PLOT, "-o", self.tmp + "/m.png", metrics],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(os.path.getsize(self.tmp + "/m.png"), 10000)
        auc, _ = results(out)
        print("train_ctr local: test AUC %.4f (the hidden model: %.4f)" % (auc, self.best_auc))
        self.assertGreater(auc, 0.70, out)
        self.assertGreater(os.path.getsize(os.path.join(self.tmp, "m-emb.table")), 1000)
        self.assertIn("table emb:", out)

    def test_dist_sync_equals_local_with_the_doubled_batch(self):
        code, local, err = self.run_local("--num-epochs=1", "--batch-size=256")
        self.assertEqual(code, 0, err)
        code, out = launch(["-n", "2", "-s", "2"] + JOB_ENV +
                           [TRAIN, "--train=" + self.train, "--test=" + self.test,
                            "--optimizer=adam", "--lr=0.01", "--num-epochs=1",
                            "--batch-size=128", "--kv-store=dist_sync"], timeout=600)
        self.assertEqual(code, 0, out)
        a, b = results(local), results(out)
        self.assertGreater(a[0], 0.6, local)
        self.assertAlmostEqual(a[0], b[0], places=3, msg=out)
        self.assertAlmostEqual(a[1], b[1], places=3, msg=out)
        self.assertIn("over 2 shard(s)", out)

    def test_dist_async_trains(self):
        code, out = launch(["-n", "2", "-s", "1"] + JOB_ENV +
                           [TRAIN, "--train=" + self.train, "--test=" + self.test,
                            "--optimizer=adam", "--lr=0.01", "--num-epochs=1",
                            "--batch-size=128", "--kv-store=dist_async"], timeout=600)
        self.assertEqual(code, 0, out)
        self.assertGreater(results(out)[0], 0.6, out)

    def test_bad_input_is_one_line(self):
        code, _, err = self.run_local("--fields=7")
        self.assertNotEqual(code, 0)
        self.assertIn("an example has 8 ids, not --fields=7", err)
        r = subprocess.run([TRAIN], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--train is required", r.stderr)


if __name__ == "__main__":
    pyunit.main()
