"""examples/train_ctr end to end on a click log written by
tools/make_click_log.py: the wide-and-deep model learns (test AUC well
above chance), dist_sync with 2 workers equals one process with the doubled
batch, dist_async trains, checkpoints resume bit-exact (tables, dense
weights, optimizer states), servers killed and started again under
--server-replicas change nothing, tables export, and bad input is a
one-line error."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import unittest

from tracker.launch_testlib import kill_marked, launch, new_marker, node_pid, read_until
from tracker.launch_testlib import start_launch, wait_no_processes
from tools import pyunit

TRAIN = os.path.abspath("examples/train_ctr")
GEN = os.path.abspath("tools/make_click_log.py")
PLOT = os.path.abspath("tools/plot_metrics")
CKPT = os.path.abspath("tools/kvtrain_checkpoint")
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
        self.assertGreater(os.path.getsize(os.path.join(self.tmp, "m-0002-emb.table")), 1000)
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

    def ckpt(self, *args):
        r = subprocess.run([CKPT] + list(args), capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout

    def assert_same_files(self, a, b, names):
        for name in names:
            with open(os.path.join(a, name), "rb") as x, open(os.path.join(b, name), "rb") as y:
                self.assertTrue(x.read() == y.read(), "%s differs between %s and %s"
                                % (name, a, b))

    def test_local_resume_is_bit_exact(self):
        straight, resumed = (tempfile.mkdtemp(dir=self.tmp) for _ in range(2))
        code, out, err = self.run_local("--num-epochs=2", "--model-prefix=" + straight + "/m")
        self.assertEqual(code, 0, err)
        code, _, err = self.run_local("--num-epochs=1", "--model-prefix=" + resumed + "/m")
        self.assertEqual(code, 0, err)
        code, again, err = self.run_local("--num-epochs=2", "--load-epoch=1",
                                          "--model-prefix=" + resumed + "/m")
        self.assertEqual(code, 0, err)
        self.assertNotIn("Epoch[0]", again)  # it started at epoch 1
        self.assertEqual(results(out), results(again))
        # One process: every byte of the checkpoint, recency included.
        self.assert_same_files(straight, resumed, ["m-0002.params", "m-0002.states",
                                                   "m-0002-emb.table", "m-0002-wide.table"])
        # The table exports as id and row, one a line, sorted by id.
        self.ckpt("export-table", straight + "/m-0002-emb.table", straight + "/emb.txt")
        with open(straight + "/emb.txt") as f:
            rows = [line.split() for line in f]
        self.assertGreater(len(rows), 1000)
        self.assertTrue(all(len(r) == 17 for r in rows), rows[0])
        ids = [int(r[0]) for r in rows]
        self.assertEqual(ids, sorted(set(ids)))
        shown = self.ckpt("show", straight + "/m-0002-emb.table")
        self.assertIn("key emb, width 16, %d rows held" % len(rows), shown)

    def test_dist_sync_resume_is_bit_exact(self):
        straight, resumed = (tempfile.mkdtemp(dir=self.tmp) for _ in range(2))
        job = ["-n", "2", "-s", "2"] + JOB_ENV + [
            TRAIN, "--train=" + self.train, "--test=" + self.test, "--optimizer=adam",
            "--lr=0.01", "--batch-size=128", "--kv-store=dist_sync"]
        code, out = launch(job + ["--num-epochs=2", "--model-prefix=" + straight + "/m"],
                           timeout=600)
        self.assertEqual(code, 0, out)
        code, out1 = launch(job + ["--num-epochs=1", "--model-prefix=" + resumed + "/m"],
                            timeout=600)
        self.assertEqual(code, 0, out1)
        code, again = launch(job + ["--num-epochs=2", "--load-epoch=1",
                                    "--model-prefix=" + resumed + "/m"], timeout=600)
        self.assertEqual(code, 0, again)
        self.assertEqual(results(out), results(again))
        self.assert_same_files(straight, resumed, ["m-0002.params", "m-0002.states"])
        # The tables' rows and optimizer state are the same; their recency
        # order follows the order two workers' pulls reached a server, so the
        # rows are compared through their export.
        for d in (straight, resumed):
            for t in ("emb", "wide"):
                self.ckpt("export-table", "--format=binary", "%s/m-0002-%s.table" % (d, t),
                          "%s/%s.rows" % (d, t))
        self.assert_same_files(straight, resumed, ["emb.rows", "wide.rows"])

    def test_servers_killed_and_started_again_change_nothing(self):
        # 3 servers, each key range on two. Server 1 dies and comes back
        # (--max-restarts): it copies ranges 0 and 1, tables included, from
        # their primaries; then server 2, range 1's primary since, dies
        # too, and range 1 lives on the copy server 1 took. The tables,
        # weights and optimizer states end as in the run where nothing died.
        def run(kill):
            marker = new_marker()
            d = os.path.join(self.tmp, "servers-" + marker)
            os.makedirs(d)
            p = start_launch(["-n", "2", "-s", "3", "--server-replicas", "1",
                              "--max-restarts", "1"] + JOB_ENV + [
                TRAIN, "--train=" + self.train, "--test=" + self.test, "--optimizer=adam",
                "--lr=0.01", "--batch-size=128", "--kv-store=dist_sync", "--num-epochs=1",
                "--disp-batches=20", "--model-prefix=" + d + "/m"])
            out = ""
            try:
                if kill:
                    out += read_until(p, "Epoch[0] Batch[40]", timeout=300)
                    os.kill(node_pid(marker, "server", 1, program="train_ctr"), signal.SIGKILL)
                    out += read_until(p, "holds the key ranges it copies again", timeout=120)
                    out += read_until(p, "Epoch[0] Batch[100]", timeout=300)
                    os.kill(node_pid(marker, "server", 2, program="train_ctr"), signal.SIGKILL)
                rest, _ = p.communicate(timeout=600)
                out += rest
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            self.assertEqual(wait_no_processes(marker, timeout=15), [])
            kill_marked(marker)
            self.assertEqual(p.returncode, 0, out)
            return d, out
        plain, _ = run(False)
        killed, out = run(True)
        self.assertIn("server 2 failed with signal SIGKILL; starting it again", out)
        self.assertRegex(out, r"the job goes on, key range 1 to server 1 ")
        self.assert_same_files(plain, killed, ["m-0001.params", "m-0001.states",
                                               "m-0001-emb.table", "m-0001-wide.table"])

    def test_bad_input_is_one_line(self):
        code, _, err = self.run_local("--fields=7")
        self.assertNotEqual(code, 0)
        self.assertIn("an example has 8 ids, not --fields=7", err)
        r = subprocess.run([TRAIN], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--train is required", r.stderr)
        code, _, err = self.run_local("--load-epoch=1")
        self.assertEqual(code, 2)
        self.assertIn("--load-epoch=1 needs --model-prefix", err)
        missing = os.path.join(self.tmp, "none", "m")
        code, _, err = self.run_local("--load-epoch=1", "--model-prefix=" + missing)
        self.assertNotEqual(code, 0)
        self.assertIn(missing + "-0001.params", err)


if __name__ == "__main__":
    pyunit.main()
