"""The local launcher with real processes (a stand-in job that checks in with
its scheduler): success, output prefixes, environment, failure teardown, a
dead worker started again (--max-restarts), Ctrl-C, --timeout, launch.py
itself SIGKILLed, and no process left behind in any case."""

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from launch_testlib import (FAKE_JOB, LAUNCH, children_of, kill_marked, launch,  # noqa: E402
                            new_marker, node_pid, processes_with, read_until, start_launch,
                            wait_gone, wait_no_processes)
import launchers  # noqa: E402
from tools import pyunit  # noqa: E402


class LocalLaunchTest(unittest.TestCase):
    def setUp(self):
        self.marker = new_marker()

    def tearDown(self):
        kill_marked(self.marker)

    def job(self, *extra):
        return [sys.executable, FAKE_JOB, "--marker", self.marker] + list(extra)

    def test_job_runs_and_exits_zero(self):
        code, out = launch(["-n", "2", "-s", "2"] + self.job(
            "--print-env", "DMLC_ROLE", "--print-env", "DMLC_NUM_WORKER"))
        self.assertEqual(code, 0, out)
        for role in ("worker", "server"):
            for rank in (0, 1):
                self.assertIn("[%s %d] %s %d done" % (role, rank, role, rank), out)
                self.assertIn("[%s %d] DMLC_ROLE=%s" % (role, rank, role), out)
                self.assertIn("[%s %d] stderr line from %s %d" % (role, rank, role, rank), out)
        self.assertIn("[worker 1] DMLC_NUM_WORKER=2", out)
        self.assertIn("[scheduler 0] scheduler: all 4 nodes checked in", out)
        self.assertIn("scheduler at 127.0.0.1:", out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_env_flags_reach_the_right_processes(self):
        code, out = launch(["-n", "1", "-s", "1", "--env", "KVT_A=all",
                            "--env-server", "KVT_B=srv", "--env-worker", "KVT_B=wrk"]
                           + self.job("--print-env", "KVT_A", "--print-env", "KVT_B",
                                      "--print-env", "PS_VERBOSE"),
                           env={"PS_VERBOSE": "1"})
        self.assertEqual(code, 0, out)
        self.assertIn("[server 0] KVT_A=all", out)
        self.assertIn("[worker 0] KVT_A=all", out)
        self.assertIn("[server 0] KVT_B=srv", out)
        self.assertIn("[worker 0] KVT_B=wrk", out)
        self.assertIn("[worker 0] PS_VERBOSE=1", out)

    def test_workers_share_the_cores_unless_threads_are_chosen(self):
        saved = {v: os.environ.pop(v) for v in launchers.THREAD_VARS if v in os.environ}
        try:
            code, out = launch(["-n", "2", "-s", "2"]
                               + self.job("--print-env", "KVTRAIN_NUM_THREADS"))
            self.assertEqual(code, 0, out)
            share = max(1, launchers.host_cores() // 2)
            for rank in (0, 1):
                self.assertIn("[worker %d] KVTRAIN_NUM_THREADS=%d" % (rank, share), out)
                self.assertIn("[server %d] KVTRAIN_NUM_THREADS=1" % rank, out)
            self.assertIn("KVTRAIN_NUM_THREADS=%d per worker, 1 per server" % share, out)
            # Chosen for one role with --env-*: that role is left alone.
            code, out = launch(["-n", "1", "-s", "1", "--env-worker", "OMP_NUM_THREADS=3"]
                               + self.job("--print-env", "KVTRAIN_NUM_THREADS",
                                          "--print-env", "OMP_NUM_THREADS"))
            self.assertEqual(code, 0, out)
            self.assertIn("[worker 0] OMP_NUM_THREADS=3", out)
            self.assertIn("[worker 0] KVTRAIN_NUM_THREADS=<unset>", out)
            self.assertIn("[server 0] KVTRAIN_NUM_THREADS=1", out)
        finally:
            os.environ.update(saved)
        # Chosen in launch.py's environment: left alone everywhere.
        code, out = launch(["-n", "1", "-s", "1"]
                           + self.job("--print-env", "KVTRAIN_NUM_THREADS"),
                           env={"KVTRAIN_NUM_THREADS": "5"})
        self.assertEqual(code, 0, out)
        self.assertIn("[worker 0] KVTRAIN_NUM_THREADS=5", out)
        self.assertIn("[server 0] KVTRAIN_NUM_THREADS=5", out)
        self.assertNotIn("host's", out)

    def test_failing_worker_stops_the_job(self):
        code, out = launch(["-n", "2", "-s", "2"] + self.job(
            "--fail", "worker:1", "--hang", "*"))
        self.assertEqual(code, 3, out)
        self.assertIn("launch.py: worker 1 failed with exit code 3; stopped every other "
                      "process", out)
        self.assertIn("launch.py: last lines of worker 1:", out)
        self.assertIn("launch.py:   | failing on purpose", out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_max_restarts_starts_a_dead_worker_again(self):
        code, out = launch(["-n", "2", "-s", "1", "--max-restarts", "1"] + self.job(
            "--die-first-run", "worker:1", "--print-env", "KVTRAIN_WORKER_RESTARTS",
            "--print-env", "KVTRAIN_RESTART", "--print-env", "DMLC_RANK"))
        self.assertEqual(code, 0, out)
        self.assertIn("launch.py: worker 1 failed with signal SIGKILL; starting it again "
                      "(restart 1 of 1)", out)
        for role, rank in (("server", 0), ("worker", 0), ("worker", 1)):
            self.assertIn("[%s %d] KVTRAIN_WORKER_RESTARTS=1" % (role, rank), out)
        self.assertEqual(out.count("[worker 1] KVTRAIN_RESTART=<unset>"), 1, out)
        self.assertEqual(out.count("[worker 1] KVTRAIN_RESTART=1"), 1, out)
        self.assertEqual(out.count("[worker 1] DMLC_RANK=1"), 2, out)
        self.assertEqual(out.count("[server 0] KVTRAIN_RESTART=<unset>"), 1, out)
        self.assertIn("[worker 1] worker 1 done", out)
        self.assertIn("[scheduler 0] scheduler: all 3 nodes checked in", out)
        self.assertEqual(wait_no_processes(self.marker), [])
        # Without --max-restarts the same death ends the job.
        code, out = launch(["-n", "2", "-s", "1"] + self.job(
            "--die-first-run", "worker:1", "--print-env", "KVTRAIN_WORKER_RESTARTS"))
        self.assertNotEqual(code, 0, out)
        self.assertIn("launch.py: worker 1 failed with signal SIGKILL; stopped every other "
                      "process", out)
        self.assertIn("[worker 0] KVTRAIN_WORKER_RESTARTS=<unset>", out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_the_others_may_end_on_their_own_after_a_failure(self):
        # A kvtrain node tells the job when it fails, and the others exit
        # with their own report: they get a moment before being stopped, so
        # what they printed is not lost.
        code, out = launch(["-n", "2", "-s", "1"] + self.job(
            "--fail", "worker:1", "--leave", "worker:0", "--hang", "*"))
        self.assertEqual(code, 3, out)
        self.assertIn("[worker 0] leaving on my own", out)
        self.assertIn("launch.py: worker 1 failed with exit code 3", out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_killed_server_is_named_with_its_signal(self):
        p = start_launch(["-n", "1", "-s", "2"] + self.job("--hang", "*",
                                                          "--print-env", "DMLC_RANK"))
        read_until(p, "[server 1] DMLC_RANK=1")
        victim = None
        for pid in os.listdir("/proc"):
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if (self.marker.encode() in cmd and b"DMLC_ROLE=server" in env
                    and b"DMLC_RANK=1" in env):
                victim = int(pid)
        self.assertIsNotNone(victim)
        os.kill(victim, signal.SIGKILL)
        out, _ = p.communicate(timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("server 1 failed with signal SIGKILL", out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def launch_with_file_limit(self, args, soft, hard):
        """launch.py run to completion with RLIMIT_NOFILE (soft, hard)."""
        def limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        r = subprocess.run([sys.executable, LAUNCH] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120, text=True,
                           preexec_fn=limit)
        return r.returncode, r.stdout

    def test_more_processes_than_the_soft_file_limit_holds(self):
        # Three pipes per process: 40 workers need more than 64 descriptors.
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        code, out = self.launch_with_file_limit(["-n", "40", "-s", "0"] + self.job(),
                                                64, hard)
        self.assertEqual(code, 0, out)
        for rank in range(40):
            self.assertIn("[worker %d] worker %d done" % (rank, rank), out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_a_hard_file_limit_too_low_is_one_line_before_anything_starts(self):
        code, out = self.launch_with_file_limit(["-n", "40", "-s", "0"] + self.job(), 64, 64)
        self.assertEqual(code, 2, out)
        self.assertEqual(out.strip(), "launch.py: error: 41 processes need 187 open files in "
                         "launch.py, but its hard limit is 64: raise it (ulimit -Hn 187, or "
                         "nofile in /etc/security/limits.conf)")
        self.assertEqual(processes_with(self.marker), [])

    def test_sigint_tears_everything_down(self):
        p = start_launch(["-n", "2", "-s", "1"] + self.job("--hang", "*"))
        read_until(p, "scheduler: all 3 nodes checked in")
        start = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, out)
        self.assertLess(time.monotonic() - start, 20)
        self.assertIn("received SIGINT; stopping every process", out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_sigkilled_launcher_leaves_nothing_running(self):
        # launch.py cannot clean up after SIGKILL: its children get SIGTERM
        # from the kernel (PR_SET_PDEATHSIG) instead, exactly one (mpirun
        # takes a second as "abort now").
        logs = tempfile.mkdtemp(prefix="kvtrain-sigterms-")
        p = start_launch(["-n", "2", "-s", "1", "--launcher", "local"] +
                         self.job("--hang", "*", "--count-sigterms", logs))
        read_until(p, "scheduler: all 3 nodes checked in")
        nodes = [node_pid(self.marker, role, rank) for role, rank in
                 (("server", 0), ("worker", 0), ("worker", 1))]
        children = children_of(p.pid)  # the nodes (and the scheduler, until it exits)
        self.assertTrue(set(nodes) <= set(children), (nodes, children))
        p.kill()
        p.wait(timeout=10)
        self.assertEqual(wait_gone(children, 5), [], "still running 5 s after the SIGKILL")
        self.assertEqual(wait_no_processes(self.marker, 1), [])
        p.stdout.close()
        for name in ("server-0", "worker-0", "worker-1"):
            with open(os.path.join(logs, name)) as f:
                self.assertEqual(f.read(), "SIGTERM\n", name)
        shutil.rmtree(logs)

    def test_timeout_stops_the_job(self):
        code, out = launch(["-n", "1", "-s", "1", "--timeout", "3"] + self.job("--hang", "*"))
        self.assertEqual(code, 124, out)
        self.assertIn("the job exceeded --timeout 3 s", out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_scheduler_that_never_reports_a_port(self):
        code, out = launch(["-n", "1", "--env", "KVTRAIN_STARTUP_TIMEOUT=2",
                            "sh", "-c", "sleep 30; : " + self.marker])
        self.assertEqual(code, 1, out)
        self.assertIn("the scheduler did not report its port within 2 s", out)
        self.assertEqual(wait_no_processes(self.marker), [])


if __name__ == "__main__":
    pyunit.main()
