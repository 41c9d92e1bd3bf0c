"""The communicator across real processes on 127.0.0.1: exact sums, broadcast,
Split and point-to-point with 2, 3 and 4 ranks under tracker/launch.py -s 0,
under a simulated MPICH/PMI environment and under Open MPI's mpirun; bad
environments give one-line errors naming the variable; a rank that dies is
named by the others within seconds."""

import os
import shutil
import subprocess
import tempfile
import time
import unittest

from tracker import jobkey
from tracker.launch_testlib import launch
from tracker.testbed import free_port
from tools import pyunit

NODE = os.path.abspath("tests/collective/collective_test_node")
JOB_ENV = ["--env", "PS_HEARTBEAT_TIMEOUT=60", "--env", "KVTRAIN_STARTUP_TIMEOUT=120"]



def start_ranks(n, args=(), extra_env=None):
    """n processes with PMI_RANK/PMI_SIZE and a rendezvous, as Hydra would."""
    port = free_port()
    key = jobkey.new_secret_key()  # one CURVE key for the group, as by hand
    procs = []
    for r in range(n):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("DMLC_", "OMPI_", "PMI_"))}
        env.update({"PMI_RANK": str(r), "PMI_SIZE": str(n),
                    "KVTRAIN_RENDEZVOUS": "127.0.0.1:%d" % port,
                    "KVTRAIN_JOB_KEY": key,
                    "KVTRAIN_STARTUP_TIMEOUT": "60"})
        env.update(extra_env or {})
        procs.append(subprocess.Popen([NODE] + list(args), env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return procs


def finish(procs, timeout=120):
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            e += "\n(killed: still running after %d s)" % timeout
        out.append((p.returncode, o, e))
    return out


class LaunchPyTest(unittest.TestCase):
    def test_two_three_and_four_ranks(self):
        for n in (2, 3, 4):
            code, out = launch(["-n", str(n), "-s", "0"] + JOB_ENV + [NODE], timeout=180)
            self.assertEqual(code, 0, out)
            for r in range(n):
                self.assertIn("[worker %d] collective_test_node: rank %d of %d ok" % (r, r, n),
                              out)


class PmiEnvTest(unittest.TestCase):
    def test_three_ranks(self):
        results = finish(start_ranks(3))
        for r, (code, out, err) in enumerate(results):
            self.assertEqual(code, 0, err)
            self.assertIn("rank %d of 3 ok" % r, out)

    def test_bad_environment_is_a_one_line_error(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "PMI_"))}
        env["KVTRAIN_JOB_KEY"] = jobkey.new_secret_key()
        for extra, want in [
                ({"PMI_RANK": "2", "PMI_SIZE": "2"}, "PMI_RANK=2 is not below PMI_SIZE=2"),
                ({"PMI_RANK": "0"}, "PMI_SIZE is not set"),
                ({"PMI_RANK": "0", "PMI_SIZE": "2"}, "KVTRAIN_RENDEZVOUS"),
                ({"PMI_RANK": "0", "PMI_SIZE": "2", "KVTRAIN_RENDEZVOUS": "h:x"},
                 'KVTRAIN_RENDEZVOUS="x"')]:
            r = subprocess.run([NODE], env=dict(env, **extra), capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(want, r.stderr)
            self.assertNotIn("Check failed", r.stderr)

    def test_missing_rank_is_named_at_startup(self):
        procs = start_ranks(3, extra_env={"KVTRAIN_STARTUP_TIMEOUT": "3"})
        procs[2].kill()
        results = finish(procs[:2], timeout=60)
        procs[2].wait()
        code, _, err = results[0]
        self.assertNotEqual(code, 0)
        self.assertIn("ranks 2 of 3 did not register", err)

    def test_dead_rank_is_named_within_seconds(self):
        start = time.monotonic()
        results = finish(start_ranks(3, ["--mode=die", "--victim=2"]), timeout=60)
        elapsed = time.monotonic() - start
        self.assertEqual(results[2][0], 3)
        for code, _, err in results[:2]:
            self.assertEqual(code, 1, err)
            self.assertRegex(err, r"rank 2 \(127\.0\.0\.1:\d+\) is dead")
        # Heartbeat timeout is 10 s; the dropped connection is seen sooner.
        self.assertLess(elapsed, 30)


@unittest.skipUnless(shutil.which("mpirun"), "mpirun is not installed")
class MpirunTest(unittest.TestCase):
    def test_two_and_three_ranks(self):
        for n in (2, 3):
            session = tempfile.mkdtemp(prefix="kvtrain-ompi-")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "PMI_"))}
            env["KVTRAIN_RENDEZVOUS"] = "127.0.0.1:%d" % free_port()
            env["KVTRAIN_JOB_KEY"] = jobkey.new_secret_key()
            try:
                r = subprocess.run(
                    ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca",
                     "orte_tmpdir_base", session, "-n", str(n), "-x", "KVTRAIN_RENDEZVOUS", "-x", "KVTRAIN_JOB_KEY",
                     NODE], env=env, capture_output=True, text=True, timeout=180)
            finally:
                shutil.rmtree(session, ignore_errors=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for rank in range(n):
                self.assertIn("rank %d of %d ok" % (rank, n), r.stdout)

    def test_launch_py_mpi_launcher(self):
        code, out = launch(["-n", "2", "-s", "0", "--launcher", "mpi"] + JOB_ENV + [NODE],
                           timeout=180)
        self.assertEqual(code, 0, out)
        for r in (0, 1):
            self.assertIn("collective_test_node: rank %d of 2 ok" % r, out)


if __name__ == "__main__":
    pyunit.main()
