"""The mpi launcher with Debian's Open MPI (mpirun --allow-run-as-root
--oversubscribe): a 2x2 job, per-rank output prefixes and DMLC_RANK from the
MPI rank, and a failing worker that stops the job with nothing left over."""

import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from launch_testlib import FAKE_JOB, kill_marked, launch, new_marker, wait_no_processes  # noqa: E402
from tools import pyunit  # noqa: E402


class MpiLaunchTest(unittest.TestCase):
    def setUp(self):
        if not shutil.which("mpirun"):
            self.skipTest("mpirun is not installed (tools/setup.sh installs openmpi-bin)")
        self.marker = new_marker()

    def tearDown(self):
        kill_marked(self.marker)

    def job(self, *extra):
        return [sys.executable, FAKE_JOB, "--marker", self.marker] + list(extra)

    def test_two_by_two_job(self):
        code, out = launch(["-n", "2", "-s", "2", "--launcher", "mpi", "--env", "KVT_A=everyone",
                            "--env-worker", "KVT_B=workers"] + self.job(
            "--print-env", "DMLC_RANK", "--print-env", "DMLC_ROLE", "--print-env", "KVT_A",
            "--print-env", "KVT_B"))
        self.assertEqual(code, 0, out)
        for role in ("server", "worker"):
            for rank in (0, 1):
                self.assertIn("[%s %d] DMLC_RANK=%d" % (role, rank, rank), out)
                self.assertIn("[%s %d] DMLC_ROLE=%s" % (role, rank, role), out)
                self.assertIn("[%s %d] %s %d done" % (role, rank, role, rank), out)
                self.assertIn("[%s %d] KVT_A=everyone" % (role, rank), out)
                self.assertIn("[%s %d] KVT_B=%s" % (role, rank,
                                                   "workers" if role == "worker" else "<unset>"),
                              out)
        self.assertIn("[scheduler 0] scheduler: all 4 nodes checked in", out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_failing_worker_stops_the_job(self):
        code, out = launch(["-n", "2", "-s", "1", "--launcher", "mpi"] + self.job(
            "--fail", "worker:1", "--hang", "*"), timeout=180)
        self.assertNotEqual(code, 0, out)
        self.assertIn("worker group (mpirun) failed", out)
        self.assertIn("[worker 1] failing on purpose", out)
        self.assertEqual(wait_no_processes(self.marker), [])


if __name__ == "__main__":
    pyunit.main()
