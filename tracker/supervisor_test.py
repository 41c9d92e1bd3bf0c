"""Unit tests of how the launcher runs its processes: the remote script's
quoting and exit code, the parent-death signal, the supervisor's output
lines, servers it lets go and workers it starts again, exit descriptions,
and the tests' read_until."""

import io
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import launch_testlib  # noqa: E402
import launchers  # noqa: E402
import supervisor  # noqa: E402
from tools import pyunit  # noqa: E402


class RemoteScriptTest(unittest.TestCase):
    """The ssh wrapper run by a local bash: same script, no sshd needed."""

    def run_script(self, command, close_stdin_after=None):
        script = launchers.remote_script({"KVT_SECRET": "s3cr3t 'quoted'"}, tempfile.gettempdir(),
                                         command)
        p = subprocess.Popen(["bash", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        p.stdin.write(script)
        p.stdin.flush()
        if close_stdin_after is not None:
            time.sleep(close_stdin_after)
            p.stdin.close()
            out = p.stdout.read()
            p.wait(timeout=30)
            return p, out
        return p, None

    @staticmethod
    def finish(p):
        """Waits for the script with its stdin still open, as ssh keeps it
        while the launcher lives (closing it first stops the job: SIGTERM)."""
        p.wait(timeout=30)
        out = p.stdout.read()
        p.stdin.close()
        p.stdout.close()
        return out

    def test_exports_and_exit_code(self):
        p, _ = self.run_script(["sh", "-c", 'echo "$KVT_SECRET"; exit 7'])
        out = self.finish(p)
        self.assertEqual(p.returncode, 7)
        self.assertIn("s3cr3t 'quoted'", out)

    def test_missing_command(self):
        p, _ = self.run_script(["no-such-prog-kvt"])
        out = self.finish(p)
        self.assertEqual(p.returncode, 127)
        self.assertIn("command not found on", out)

    def test_shell_syntax_in_error_messages_is_not_run(self):
        # The directory and the program appear in the script's messages too.
        d = tempfile.mkdtemp()
        canary = os.path.join(d, "canary")
        runs = "$(touch %s)`touch %s`" % (canary, canary)
        for text in (runs, runs + " \"'\\ $HOME"):  # and quotes: no syntax error
            gone = os.path.join(d, "gone " + text)
            self.check_error_message(gone, ["true"], gone, canary)
            self.check_error_message(d, ["no-such-prog " + text], "no-such-prog " + text,
                                     canary)

    def check_error_message(self, workdir, command, nasty, canary):
        script = launchers.remote_script({}, workdir, command)
        r = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True,
                           timeout=30)
        self.assertFalse(os.path.exists(canary), "%s ran: %s" % (nasty, r.stderr))
        self.assertEqual(r.returncode, 127, r.stderr)
        self.assertIn(nasty, r.stderr)  # verbatim

    def test_job_runs_while_stdin_is_open_and_stops_when_it_closes(self):
        marker = "kvtmark-remote-%d" % os.getpid()
        p, out = self.run_script(["sh", "-c", "sleep 1; echo alive; sleep 300; : " + marker],
                                 close_stdin_after=3.0)
        self.assertIn("alive", out)  # not stopped while the launcher is there
        self.assertNotEqual(p.returncode, 0)
        from launch_testlib import wait_no_processes
        self.assertEqual(wait_no_processes(marker, 10), [])


class ParentDeathTest(unittest.TestCase):
    """supervisor.die_with_launcher, the preexec_fn of every child."""

    GET_PDEATHSIG = ("import ctypes; v = ctypes.c_int(); "
                     "ctypes.CDLL(None).prctl(2, ctypes.byref(v)); print(v.value)")

    def test_child_gets_sigterm_when_the_launcher_dies(self):
        r = subprocess.run([sys.executable, "-c", self.GET_PDEATHSIG], capture_output=True,
                           text=True, preexec_fn=supervisor.die_with_launcher())
        self.assertEqual(r.stdout.strip(), "15")  # PR_GET_PDEATHSIG: SIGTERM

    def test_child_of_a_launcher_already_gone_does_not_start(self):
        # Forked by another parent than the one that made the preexec_fn (as
        # after the launcher died and the child was adopted): exits at once.
        preexec = supervisor.die_with_launcher()
        pid = os.fork()
        if pid == 0:
            try:
                r = subprocess.run(["sh", "-c", "echo started"], capture_output=True,
                                   preexec_fn=preexec)
                os._exit(200 if r.stdout else r.returncode)
            finally:
                os._exit(201)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 128 + 15)


class SupervisorOutputTest(unittest.TestCase):
    """The supervisor reads every pipe from the one thread it runs on."""

    def test_lines_partial_lines_and_the_last_unterminated_one(self):
        out = io.BytesIO()
        sup = supervisor.Supervisor(out=out)
        prog = ("import sys, time\n"
                "sys.stdout.write('one\\ntw'); sys.stdout.flush(); time.sleep(0.3)\n"
                "sys.stdout.write('o\\nthree\\n'); sys.stderr.write('err\\n')\n"
                "sys.stdout.flush(); sys.stderr.flush(); time.sleep(0.3)\n"
                "sys.stdout.write('last')\n")
        sup.start(supervisor.Proc("worker", 3, [sys.executable, "-c", prog], dict(os.environ)))
        self.assertEqual(threading.active_count(), 1)
        self.assertEqual(sup.run(), 0)
        lines = out.getvalue().decode().splitlines()
        self.assertEqual([l for l in lines if l != "[worker 3] err"],
                         ["[worker 3] one", "[worker 3] two", "[worker 3] three",
                          "[worker 3] last"])
        self.assertIn("[worker 3] err", lines)
        self.assertEqual(threading.active_count(), 1)


class ToleranceTest(unittest.TestCase):
    """With server replicas the job goes on without up to that many servers;
    one failure more ends it."""

    def run_job(self, tolerate, failing_servers):
        out = io.BytesIO()
        sup = supervisor.Supervisor(out=out, grace_seconds=2)
        sup.tolerate = {"server": tolerate}
        for rank in range(3):
            code = 9 if rank < failing_servers else 0
            sup.start(supervisor.Proc("server", rank,
                                      [sys.executable, "-c", "raise SystemExit(%d)" % code],
                                      dict(os.environ)))
        sup.start(supervisor.Proc("worker", 0, [sys.executable, "-c", "print('done')"],
                                  dict(os.environ)))
        return sup.run(timeout=60), out.getvalue().decode()

    def test_up_to_the_replicas_fail_and_the_job_ends_well(self):
        code, out = self.run_job(tolerate=2, failing_servers=2)
        self.assertEqual(code, 0, out)
        for rank in (0, 1):
            self.assertIn("server %d failed with exit code 9; the job goes on without it" % rank,
                          out)

    def test_one_more_ends_the_job(self):
        code, out = self.run_job(tolerate=1, failing_servers=2)
        self.assertNotEqual(code, 0, out)
        self.assertIn("the job goes on without it", out)
        self.assertIn("failed with exit code 9; stopped every other process", out)


class RestartTest(unittest.TestCase):
    """A worker that fails is started again, same rank and environment plus
    KVTRAIN_RESTART, up to the restarts of its role; the others go on."""

    # Prints its run and rank, then fails as argv[2] says: "first" dies by
    # SIGKILL on its first run only, "always" exits 3 on every run.
    WORKER = ("import os, sys\n"
              "print('run', os.environ.get('KVTRAIN_RESTART', '<unset>'), 'rank',\n"
              "      os.environ['DMLC_RANK'], os.environ['KVT_EXTRA'], flush=True)\n"
              "if sys.argv[2] == 'always':\n"
              "    raise SystemExit(3)\n"
              "if 'KVTRAIN_RESTART' not in os.environ:\n"
              "    os.kill(os.getpid(), 9)\n"
              "with open(sys.argv[1], 'w') as f:\n"
              "    f.write('back')\n")
    # Started once, runs until the restarted worker writes to the FIFO.
    SERVER = ("import sys\n"
              "print('up', flush=True)\n"
              "with open(sys.argv[1]) as f:\n"
              "    print('heard', f.read(), flush=True)\n")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvtrain-restart-")
        self.fifo = os.path.join(self.tmp, "fifo")
        os.mkfifo(self.fifo)
        for name, text in (("worker.py", self.WORKER), ("server.py", self.SERVER)):
            with open(os.path.join(self.tmp, name), "w") as f:
                f.write(text)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_job(self, restarts, how, timeout=60):
        out = io.BytesIO()
        sup = supervisor.Supervisor(out=out, grace_seconds=2)
        sup.restarts = {"worker": restarts}
        env = dict(os.environ, KVT_EXTRA="extra")
        env.pop("KVTRAIN_RESTART", None)
        sup.start(supervisor.Proc("server", 0, [sys.executable,
                                                os.path.join(self.tmp, "server.py"), self.fifo],
                                  dict(env, DMLC_RANK="0")))
        sup.start(supervisor.Proc("worker", 0, [sys.executable, "-c", "print('fine')"],
                                  dict(env, DMLC_RANK="0")))
        sup.start(supervisor.Proc("worker", 1, [sys.executable,
                                                os.path.join(self.tmp, "worker.py"),
                                                self.fifo, how],
                                  dict(env, DMLC_RANK="1")))
        return sup, sup.run(timeout=timeout), out.getvalue().decode()

    def test_a_worker_killed_once_is_started_again_and_the_job_ends_well(self):
        sup, code, out = self.run_job(1, "first")
        self.assertEqual(code, 0, out)
        lines = out.splitlines()
        self.assertEqual([l for l in lines if l.startswith("launch.py:")],
                         ["launch.py: worker 1 failed with signal SIGKILL; starting it "
                          "again (restart 1 of 1)"])
        # Same rank and environment, under the same label; the first run's
        # line is not lost.
        self.assertIn("[worker 1] run <unset> rank 1 extra", lines)
        self.assertIn("[worker 1] run 1 rank 1 extra", lines)
        # The server was not started again: it heard from the new worker.
        self.assertEqual(lines.count("[server 0] up"), 1, out)
        self.assertIn("[server 0] heard back", lines)
        # The new process took the dead one's place.
        self.assertEqual([(p.role, p.rank, p.restart, p.returncode) for p in sup.procs],
                         [("server", 0, 0, 0), ("worker", 0, 0, 0), ("worker", 1, 1, 0)])
        self.assertEqual(sup.procs[2].env["KVTRAIN_RESTART"], "1")

    def test_restarts_used_up_end_the_job_naming_them(self):
        sup, code, out = self.run_job(1, "always")
        self.assertEqual(code, 3, out)
        lines = out.splitlines()
        self.assertEqual([l for l in lines if "starting it again" in l],
                         ["launch.py: worker 1 failed with exit code 3; starting it again "
                          "(restart 1 of 1)"])
        self.assertEqual([l for l in lines if l.startswith("[worker 1] run")],
                         ["[worker 1] run <unset> rank 1 extra", "[worker 1] run 1 rank 1 extra"])
        self.assertIn("launch.py: worker 1 failed with exit code 3 (after 1 restart); stopped "
                      "every other process", lines)
        # The last lines are the last run's.
        self.assertEqual(lines[-1], "launch.py:   | run 1 rank 1 extra")
        self.assertIsNotNone(sup.procs[0].returncode)  # the server was stopped

    def test_more_restarts_than_one(self):
        sup, code, out = self.run_job(2, "always")
        self.assertEqual(code, 3, out)
        self.assertIn("(restart 2 of 2)", out)
        self.assertNotIn("(restart 3", out)
        self.assertIn("worker 1 failed with exit code 3 (after 2 restarts); stopped", out)
        self.assertEqual(out.count("[worker 1] run"), 3, out)

    def test_without_restarts_a_dead_worker_ends_the_job(self):
        sup, code, out = self.run_job(0, "first")
        self.assertNotEqual(code, 0, out)
        self.assertNotIn("starting it again", out)
        self.assertIn("launch.py: worker 1 failed with signal SIGKILL; stopped every other "
                      "process", out)
        self.assertNotIn("after", out)

    def test_a_worker_dead_after_the_scheduler_left_is_not_started_again(self):
        # The scheduler ends the job (exits 0); then a worker dies: there is
        # no job to rejoin, so it ends the launcher's run as without restarts.
        out = io.BytesIO()
        sup = supervisor.Supervisor(out=out, grace_seconds=2)
        sup.restarts = {"worker": 2}
        sched = ("import os, sys\n"
                 "with open(sys.argv[1], 'w') as f:\n"
                 "    f.write(str(os.getpid()))\n")
        # Dies once the scheduler has exited (a zombie until the launcher reaps it).
        worker = ("import os, sys\n"
                  "pid = int(open(sys.argv[1]).read())\n"
                  "def gone():\n"
                  "    try:\n"
                  "        return open('/proc/%d/stat' % pid).read().split(')')[1].split()[0] "
                  "== 'Z'\n"
                  "    except OSError:\n"
                  "        return True\n"
                  "while not gone():\n"
                  "    os.sched_yield()\n"
                  "os.kill(os.getpid(), 9)\n")
        sup.start(supervisor.Proc("scheduler", 0, [sys.executable, "-c", sched, self.fifo],
                                  dict(os.environ)))
        sup.start(supervisor.Proc("worker", 0, [sys.executable, "-c", worker, self.fifo],
                                  dict(os.environ)))
        code = sup.run(timeout=60)
        text = out.getvalue().decode()
        self.assertNotEqual(code, 0, text)
        self.assertNotIn("starting it again", text)
        self.assertIn("worker 0 failed with signal SIGKILL; stopped every other process", text)

    def test_only_failed_processes_of_the_role_are_started_again(self):
        out = io.BytesIO()
        sup = supervisor.Supervisor(out=out, grace_seconds=2)
        sup.restarts = {"worker": 2}
        sup.start(supervisor.Proc("worker", 0, [sys.executable, "-c", "print('once')"],
                                  dict(os.environ)))
        sup.start(supervisor.Proc("server", 0, [sys.executable, "-c", "raise SystemExit(5)"],
                                  dict(os.environ)))
        code = sup.run(timeout=60)
        text = out.getvalue().decode()
        self.assertEqual(code, 5, text)
        self.assertNotIn("starting it again", text)
        self.assertEqual(text.count("[worker 0] once"), 1, text)
        self.assertIn("server 0 failed with exit code 5; stopped every other process", text)

    def test_a_remote_process_is_named_with_its_host(self):
        out = io.BytesIO()
        sup = supervisor.Supervisor(out=out, grace_seconds=2)
        sup.restarts = {"worker": 1}
        # A wrapper's exit code carries the remote signal as 128+N.
        sup.start(supervisor.Proc("worker", 2, [sys.executable, "-c", "raise SystemExit(137)"],
                                  dict(os.environ), host="node7", remote=True))
        self.assertEqual(sup.run(timeout=60), 137)
        text = out.getvalue().decode()
        self.assertIn("launch.py: worker 2 on node7 failed with exit code 137 (SIGKILL); "
                      "starting it again (restart 1 of 1)\n", text)
        self.assertIn("launch.py: worker 2 on node7 failed with exit code 137 (SIGKILL) "
                      "(after 1 restart); stopped every other process\n", text)
        self.assertEqual((sup.procs[0].host, sup.procs[0].remote), ("node7", True))


class DescribeExitTest(unittest.TestCase):
    def test_forms(self):
        self.assertEqual(supervisor.describe_exit(3), "exit code 3")
        self.assertEqual(supervisor.describe_exit(-9), "signal SIGKILL")
        self.assertEqual(supervisor.describe_exit(137, remote=True), "exit code 137 (SIGKILL)")
        self.assertEqual(supervisor.describe_exit(137), "exit code 137")


class ReadUntilTest(unittest.TestCase):
    """launch_testlib.read_until, which the multi-process tests wait with."""

    def test_lines_that_arrive_together_are_all_seen(self):
        # Both lines reach the pipe in one write, then nothing more comes:
        # each must still be found, by this call and the next.
        p = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, time; sys.stdout.write('one\\ntwo\\nthree\\n'); "
             "sys.stdout.flush(); time.sleep(30)"],
            stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(launch_testlib.read_until(p, "one", timeout=10), "one\n")
            self.assertEqual(launch_testlib.read_until(p, "three", timeout=10),
                             "two\nthree\n")
        finally:
            p.kill()
            p.communicate()

    def test_timeout_shows_what_was_read(self):
        p = subprocess.Popen([sys.executable, "-c", "print('partial')"],
                             stdout=subprocess.PIPE, text=True)
        with self.assertRaisesRegex(AssertionError, "(?s)did not see 'never'.*partial"):
            launch_testlib.read_until(p, "never", timeout=5)
        p.communicate()


if __name__ == "__main__":
    pyunit.main()
