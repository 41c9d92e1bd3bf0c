"""The mpi launcher with Debian's Open MPI (mpirun --allow-run-as-root
--oversubscribe): a 2x2 job, per-rank output prefixes and DMLC_RANK from the
MPI rank, a failing worker that stops the job, and launch.py itself SIGKILLed,
with nothing left over."""

import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from launch_testlib import (FAKE_JOB, children_of, kill_marked, launch,  # noqa: E402
                            new_marker, read_until, start_launch, wait_gone,
                            wait_no_processes)
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

    def test_sigkilled_launcher_leaves_nothing_running(self):
        # The kernel sends each mpirun SIGTERM (PR_SET_PDEATHSIG) when
        # launch.py dies; mpirun stops its ranks.
        p = start_launch(["-n", "2", "-s", "1", "--launcher", "mpi"] + self.job("--hang", "*"))
        read_until(p, "scheduler: all 3 nodes checked in", timeout=120)
        children = children_of(p.pid)
        self.assertGreaterEqual(len(children), 2, children)  # the mpiruns
        p.kill()
        p.wait(timeout=10)
        self.assertEqual(wait_gone(children, 10), [], "still running 10 s after the SIGKILL")
        self.assertEqual(wait_no_processes(self.marker, 5), [])
        p.stdout.close()


if __name__ == "__main__":
    pyunit.main()
