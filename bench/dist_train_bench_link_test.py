"""dist_train_bench --link=1gbit end to end with tiny sizes: the job runs on
the emulated cluster, and its table shows each dist_sync row against its
ideal and against bench/tcp_replay (the same messages over plain TCP on the
same links), each a measured rate. Root only; skipped where namespaces
cannot be made."""

import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import emulated_cluster  # noqa: E402
from tools import pyunit  # noqa: E402


def built(path):
    for p in (os.path.join(ROOT, path), os.path.join(ROOT, "bazel-bin", path)):
        if os.access(p, os.X_OK):
            return p
    raise FileNotFoundError(path + " is not built")


@unittest.skipUnless(emulated_cluster.available(), emulated_cluster.UNAVAILABLE)
class LinkModeTest(unittest.TestCase):
    def test_rows_against_ideal_and_plain_tcp(self):
        out = subprocess.run(
            [sys.executable, os.path.join(HERE, "dist_train_bench.py"), "--link=1gbit",
             "--train", built("examples/train_mnist"), "--replay", built("bench/tcp_replay"),
             "--launch", os.path.join(ROOT, "tracker/launch.py"), "--nets", "mlp",
             "--rows", "local,sync1w1s,sync2w2s,async2w2s", "--security", "default", "--runs", "1",
             "--epochs", "2", "--num-examples", "2000", "--timeout", "120"],
            capture_output=True, text=True, timeout=600)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("ideal  default/ideal | plain TCP  default/plain", out.stdout)
        for row in ("dist_sync 1w1s", "dist_sync 2w2s", "dist_async 2w2s"):
            m = re.search(r"^%s *\| *(\d+) .*\| *(\d+) +[0-9.]+x \| *(\d+) +[0-9.]+x$" % row,
                          out.stdout, re.M)
            self.assertIsNotNone(m, "no %s row with ideal and plain TCP:\n%s" % (row, out.stdout))
            for rate in m.groups():
                self.assertGreater(int(rate), 0)


if __name__ == "__main__":
    pyunit.main()
