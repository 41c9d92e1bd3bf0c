"""The ssh launcher against a real sshd on 127.0.0.1 (throw-away keys, free
port): a 2x2 job, --sync-dst-dir with one host for four processes, env and
DMLC_NODE_HOST on the remote side, a directory and arguments full of shell
syntax, a variable name that is not one, the host-key policy, an unreachable
host, a failing and a SIGKILLed remote worker, one started again
(--max-restarts), SIGINT, and launch.py itself SIGKILLed — with no process
left behind."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import testbed  # noqa: E402
from launch_testlib import (FAKE_JOB, children_of, kill_marked, launch,  # noqa: E402
                            new_marker, processes_with, read_until, start_launch,
                            wait_gone, wait_no_processes)
from tools import pyunit  # noqa: E402


def setUpModule():
    global SSHD, WORKDIR
    if not os.path.exists(testbed.SSHD):
        raise unittest.SkipTest("openssh-server is not installed (tools/setup.sh installs it)")
    WORKDIR = testbed.temp_dir()
    SSHD = testbed.SshServer(WORKDIR).start()


def tearDownModule():
    SSHD.stop()
    shutil.rmtree(WORKDIR, ignore_errors=True)


class SshLaunchTest(unittest.TestCase):
    def setUp(self):
        self.marker = new_marker()
        self.tmp = tempfile.mkdtemp(prefix="kvtrain-sshjob-")
        self.hostfile = os.path.join(self.tmp, "hosts")
        with open(self.hostfile, "w") as f:
            f.write("# one host, four processes\n127.0.0.1:%d\n" % SSHD.port)

    def tearDown(self):
        kill_marked(self.marker)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def ssh_args(self):
        return ["--ssh-arg=%s" % a for a in SSHD.client_args()]

    def base(self, n=2, s=2):
        return (["-n", str(n), "-s", str(s), "--launcher", "ssh", "-H", self.hostfile]
                + self.ssh_args())

    def job(self, *extra):
        return [sys.executable, FAKE_JOB, "--marker", self.marker] + list(extra)

    def test_two_by_two_job(self):
        code, out = launch(self.base() + ["--env", "KVT_A=1"] + self.job(
            "--print-env", "DMLC_NODE_HOST", "--print-env", "KVT_A",
            "--print-env", "KVTRAIN_TEST_FORWARD"), env={"KVTRAIN_TEST_FORWARD": "yes"})
        self.assertEqual(code, 0, out)
        for role in ("server", "worker"):
            for rank in (0, 1):
                self.assertIn("launch.py: %s %d -> 127.0.0.1" % (role, rank), out)
                self.assertIn("[%s %d] %s %d done" % (role, rank, role, rank), out)
                self.assertIn("[%s %d] DMLC_NODE_HOST=127.0.0.1" % (role, rank), out)
                self.assertIn("[%s %d] KVT_A=1" % (role, rank), out)
                self.assertIn("[%s %d] KVTRAIN_TEST_FORWARD=yes" % (role, rank), out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_secret_values_travel_on_stdin_not_argv(self):
        # A forwarded variable (KVTRAIN_*) of the launcher's environment.
        p = start_launch(self.base(1, 1) + self.job("--print-env", "KVTRAIN_TEST_SECRET",
                                                    "--hang", "*"),
                         env={"KVTRAIN_TEST_SECRET": "hunter2-" + self.marker})
        read_until(p, "[worker 0] KVTRAIN_TEST_SECRET=hunter2-")
        # No process on the machine (ssh clients, remote shells, the job)
        # has the secret on its command line.
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if int(pid) != os.getpid():
                self.assertNotIn(b"hunter2", cmd, "pid %s: %r" % (pid, cmd))
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_job_key_travels_on_stdin_not_argv(self):
        # The key launch.py makes for the job reaches every remote process in
        # its environment (through the script on ssh's stdin) and is on no
        # command line; all processes, the local scheduler too, get the same.
        p = start_launch(self.base(1, 1) + self.job("--report-key", "--hang", "*"))
        out = read_until(p, "[worker 0] key:")
        if "[server 0] key:" not in out:
            out += read_until(p, "[server 0] key:")
        digests = set(l.split("sha=")[1] for l in out.splitlines() if "] key: env" in l)
        self.assertEqual(len(digests), 1, out)
        keys = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            for e in env:
                if e.startswith(b"KVTRAIN_JOB_KEY=") and self.marker.encode() in cmd:
                    keys.add(e.split(b"=", 1)[1])
        self.assertEqual(len(keys), 1, keys)
        key = keys.pop()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            self.assertNotIn(key, cmd, "pid %s: %r" % (pid, cmd))
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_shell_syntax_in_directory_and_arguments_arrives_verbatim(self):
        # Each would run `touch $KVTRAIN_TEST_CANARY` (set in the remote
        # script) if any part of the script or the probe left it unquoted.
        touch = "touch $KVTRAIN_TEST_CANARY"
        nasty = "a b  $HOME ; %s; $(%s) `%s` 'sq' \"dq\" \\ *" % (touch, touch, touch)
        workdir = os.path.join(self.tmp, "wd " + nasty)
        os.makedirs(workdir)
        canary = os.path.join(self.tmp, "canary")
        arg = nasty + "\nline two | " + touch + " && " + touch
        code, out = launch(self.base(1, 1) + self.job("--say=" + arg, "--print-cwd"),
                           cwd=workdir, env={"KVTRAIN_TEST_CANARY": canary})
        self.assertEqual(code, 0, out)
        for name in ("server 0", "worker 0"):
            self.assertIn("[%s] say=%s\n" % (name, json.dumps(arg)), out)
            self.assertIn("[%s] cwd=%s\n" % (name, json.dumps(workdir)), out)
        self.assertFalse(os.path.exists(canary), "a command in the text ran")

    def test_variable_name_that_is_not_one_is_refused(self):
        # A forwarded name goes unquoted into the remote script: this one
        # would run `touch` there.
        canary = os.path.join(self.tmp, "canary")
        code, out = launch(self.base(1, 1) + self.job(),
                           env={"KVTRAIN_X;touch %s;: " % canary: "1"})
        self.assertFalse(os.path.exists(canary), "the name ran a command: " + out)
        self.assertEqual(code, 2, out)
        self.assertIn("launch.py: error: launch.py's environment has a variable named "
                      "'KVTRAIN_X;touch %s;: '" % canary, out)
        self.assertNotIn("[scheduler 0]", out)

    def test_host_key_policy(self):
        known = os.path.join(self.tmp, "known_hosts")
        open(known, "w").close()
        args = ["--ssh-arg=%s" % a for a in
                ["-i", os.path.join(WORKDIR, "client_key"), "-o", "UserKnownHostsFile=" + known,
                 "-o", "LogLevel=ERROR"]]
        base = ["-n", "1", "-s", "1", "-H", self.hostfile] + args
        # Strict (the variable): a host not in known_hosts is refused by name.
        code, out = launch(base + self.job(), env={"KVTRAIN_SSH_STRICT_HOST_KEYS": "1"})
        self.assertEqual(code, 2, out)
        self.assertIn("launch.py: error: cannot reach host 127.0.0.1 over ssh: Host key "
                      "verification failed. (--ssh-strict-host-keys: its key must be in "
                      "known_hosts already)", out)
        self.assertNotIn("[scheduler 0]", out)
        self.assertEqual(os.path.getsize(known), 0)
        # The default (accept-new) trusts the first-seen host and records it.
        code, out = launch(base + self.job())
        self.assertEqual(code, 0, out)
        found = subprocess.run(["ssh-keygen", "-F", "[127.0.0.1]:%d" % SSHD.port, "-f", known],
                               capture_output=True, text=True)
        self.assertIn("ssh-ed25519", found.stdout)
        # Strict (the flag) with the key known, whatever --ssh-arg says.
        code, out = launch(base + ["--ssh-strict-host-keys",
                                   "--ssh-arg=-oStrictHostKeyChecking=no"] + self.job())
        self.assertEqual(code, 0, out)
        # ... and with a changed one, refused.
        with open(known) as f:
            text = f.read()
        other = os.path.join(self.tmp, "other_key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other], check=True)
        with open(other + ".pub") as f:
            fake = f.read().split()[1]
        with open(known, "w") as f:
            f.write(" ".join(text.split()[:2] + [fake]) + "\n")
        code, out = launch(base + ["--ssh-strict-host-keys"] + self.job())
        self.assertEqual(code, 2, out)
        self.assertIn("cannot reach host 127.0.0.1 over ssh: Host key verification failed.",
                      out)
        code, out = launch(base + self.job())  # accept-new refuses it too
        self.assertEqual(code, 2, out)
        self.assertIn("cannot reach host 127.0.0.1 over ssh: Host key verification failed. "
                      "(its key is not the one known_hosts holds for it)", out)

    def test_sigkilled_launcher_leaves_nothing_running(self):
        # launch.py cannot clean up after SIGKILL: its ssh clients (and the
        # local scheduler) get SIGTERM from the kernel; the remote wrappers
        # then stop their jobs as when the connection closes.
        p = start_launch(self.base() + self.job("--hang", "*"))
        read_until(p, "scheduler: all 4 nodes checked in")
        children = children_of(p.pid)
        self.assertGreaterEqual(len(children), 4, children)  # ssh clients (and the scheduler)
        self.assertEqual(len([pid for pid in processes_with(self.marker) if pid != p.pid
                              and pid not in children]), 4)  # the remote nodes
        p.kill()
        p.wait(timeout=10)
        self.assertEqual(wait_gone(children, 5), [], "still running 5 s after the SIGKILL")
        self.assertEqual(wait_no_processes(self.marker, 5), [])
        p.stdout.close()

    def test_sync_dst_dir_with_fewer_hosts_than_processes(self):
        src = os.path.join(self.tmp, "src")
        dst = os.path.join(self.tmp, "dst")
        os.makedirs(src)
        shutil.copy(FAKE_JOB, os.path.join(src, "job.py"))
        code, out = launch(self.base() + ["--sync-dst-dir", dst, sys.executable, "job.py",
                                          "--marker", self.marker], cwd=src)
        self.assertEqual(code, 0, out)
        self.assertTrue(os.path.exists(os.path.join(dst, "job.py")))
        self.assertIn("launch.py: rsync %s -> 127.0.0.1:%s" % (src, dst), out)
        self.assertIn("[worker 1] worker 1 done", out)

    def test_unreachable_host_fails_before_anything_starts(self):
        with open(self.hostfile, "a") as f:
            f.write("127.0.0.1:%d\n" % testbed.free_port())
        code, out = launch(self.base() + self.job())
        self.assertEqual(code, 2, out)
        self.assertIn("launch.py: error: cannot reach host 127.0.0.1 over ssh", out)
        self.assertNotIn("[scheduler 0]", out)

    def test_sync_to_an_impossible_directory(self):
        blocker = os.path.join(self.tmp, "a-file")
        open(blocker, "w").close()
        dst = os.path.join(blocker, "sub")  # a directory under a regular file
        code, out = launch(self.base() + ["--sync-dst-dir", dst] + self.job())
        self.assertEqual(code, 2, out)
        self.assertIn("launch.py: error: rsync to 127.0.0.1:%s failed" % dst, out)
        self.assertNotIn("[scheduler 0]", out)

    def test_failing_remote_worker_stops_everything(self):
        code, out = launch(self.base() + self.job("--fail", "worker:0", "--hang", "*"))
        self.assertEqual(code, 3, out)
        self.assertIn("launch.py: worker 0 on 127.0.0.1 failed with exit code 3", out)
        self.assertIn("launch.py:   | failing on purpose", out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_sigkilled_remote_worker_and_sigint(self):
        p = start_launch(self.base() + self.job("--hang", "*", "--print-env", "DMLC_RANK"))
        read_until(p, "scheduler: all 4 nodes checked in")
        victim = self.find_job_process("worker", "1")
        os.kill(victim, signal.SIGKILL)
        start = time.monotonic()
        out, _ = p.communicate(timeout=60)
        self.assertLess(time.monotonic() - start, 30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("worker 1 on 127.0.0.1 failed with exit code 137 (SIGKILL)", out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_max_restarts_starts_a_dead_remote_worker_again(self):
        code, out = launch(self.base() + ["--max-restarts", "2"] + self.job(
            "--die-first-run", "worker:0", "--print-env", "KVTRAIN_WORKER_RESTARTS",
            "--print-env", "KVTRAIN_RESTART", "--print-env", "DMLC_NODE_HOST"))
        self.assertEqual(code, 0, out)
        self.assertIn("launch.py: worker 0 on 127.0.0.1 failed with exit code 137 (SIGKILL); "
                      "starting it again (restart 1 of 2)", out)
        self.assertEqual(out.count("[worker 0] KVTRAIN_RESTART=1"), 1, out)
        self.assertEqual(out.count("[worker 0] DMLC_NODE_HOST=127.0.0.1"), 2, out)
        self.assertIn("[server 1] KVTRAIN_WORKER_RESTARTS=2", out)
        self.assertIn("[worker 0] worker 0 done", out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_sigint_leaves_nothing_running(self):
        p = start_launch(self.base() + self.job("--hang", "*"))
        read_until(p, "scheduler: all 4 nodes checked in")
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, out)
        self.assertEqual(wait_no_processes(self.marker), [])

    def find_job_process(self, role, rank):
        for pid in processes_with(self.marker):
            try:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if (FAKE_JOB.encode() in cmd and b"DMLC_ROLE=" + role.encode() in env
                    and b"DMLC_RANK=" + rank.encode() in env):
                return pid
        self.fail("no %s %s process found" % (role, rank))


if __name__ == "__main__":
    pyunit.main()
