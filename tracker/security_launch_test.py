"""The job key in the launcher: Z85 (agreeing with net/curve_test.cc),
key files and their modes, what each process gets (a 0600 file locally, the
environment for ssh and mpirun, never a command line), the same key for the
whole job, --insecure, and keys refused on launch.py's command line."""

import hashlib
import os
import re
import signal
import stat
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jobkey  # noqa: E402
import launchers  # noqa: E402
from launch_testlib import (FAKE_JOB, kill_marked, launch, new_marker,  # noqa: E402
                            read_until, start_launch, wait_no_processes)
from tools import pyunit  # noqa: E402

# net/curve_test.cc decodes the same text to bytes 0..31.
BYTES_0_TO_31_Z85 = "009c61o!#m2NH?C3>iWS5d]J*6CRx17-skh9337x"


def digest(key):
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class Z85Test(unittest.TestCase):
    def test_vectors(self):
        self.assertEqual(jobkey.z85_encode(bytes.fromhex("864FD26FB559F75B")), "HelloWorld")
        self.assertEqual(jobkey.z85_encode(bytes(range(32))), BYTES_0_TO_31_Z85)
        self.assertEqual(jobkey.z85_decode(BYTES_0_TO_31_Z85), bytes(range(32)))

    def test_round_trip_and_errors(self):
        for _ in range(50):
            data = os.urandom(32)
            self.assertEqual(jobkey.z85_decode(jobkey.z85_encode(data)), data)
        key = jobkey.new_secret_key()
        self.assertEqual(len(key), 40)
        self.assertEqual(jobkey.check_key_text(key, "x"), key)
        with self.assertRaises(ValueError):
            jobkey.z85_decode("Hell")
        with self.assertRaises(ValueError):
            jobkey.z85_decode("Hell\"")
        with self.assertRaises(ValueError):
            jobkey.z85_encode(b"abc")
        with self.assertRaises(jobkey.KeyError_) as cm:
            jobkey.check_key_text("short", "KVTRAIN_JOB_KEY")
        self.assertIn("KVTRAIN_JOB_KEY: not a job key", str(cm.exception))


class KeyFileTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvtrain-keytest-")

    def test_written_file_is_0600_and_read_back(self):
        key = jobkey.new_secret_key()
        path = jobkey.write_key_file(self.dir, key)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(jobkey.read_key_file(path), key)
        self.assertEqual(jobkey.key_from_environ({"KVTRAIN_JOB_KEY_FILE": path}), key)

    def test_readable_file_is_refused_naming_file_and_mode(self):
        path = os.path.join(self.dir, "open.key")
        with open(path, "w") as f:
            f.write(jobkey.new_secret_key())
        os.chmod(path, 0o644)
        with self.assertRaises(jobkey.KeyError_) as cm:
            jobkey.read_key_file(path)
        self.assertIn(path, str(cm.exception))
        self.assertIn("mode 0644", str(cm.exception))
        self.assertIn("0600 or stricter", str(cm.exception))

    def test_mpirun_argv_names_the_variable_only(self):
        spec = launchers.JobSpec(["prog"], 1, 1, environ={"PATH": os.environ["PATH"]})
        spec.root_uri, spec.root_port = "127.0.0.1", 9
        key = jobkey.new_secret_key()
        spec.security_env = {"KVTRAIN_JOB_KEY": key, "KVTRAIN_JOB_ID": "j"}
        try:
            procs = launchers.mpi_procs(spec, None, [], self.dir)
        except launchers.LaunchError:
            self.skipTest("mpirun is not installed")
        for p in procs:
            self.assertNotIn(key, " ".join(p.argv))
            self.assertIn("KVTRAIN_JOB_KEY", p.argv)
            self.assertEqual(p.env["KVTRAIN_JOB_KEY"], key)


class LocalKeyTest(unittest.TestCase):
    def setUp(self):
        self.marker = new_marker()

    def tearDown(self):
        kill_marked(self.marker)

    def job(self, *extra):
        return [sys.executable, FAKE_JOB, "--marker", self.marker, "--report-key",
                "--print-env", "KVTRAIN_INSECURE", "--print-env", "KVTRAIN_JOB_ID"] + list(extra)

    def key_lines(self, out):
        return re.findall(r"^\[(\w+ \d)\] key: (.*)$", out, re.M)

    def test_default_is_one_fresh_key_in_a_0600_file(self):
        code, out = launch(["-n", "2", "-s", "1"] + self.job())
        self.assertEqual(code, 0, out)
        lines = self.key_lines(out)
        self.assertEqual(len(lines), 3, out)
        self.assertEqual(len({how for _, how in lines}), 1, out)  # one key for all
        self.assertRegex(lines[0][1], r"^file mode=0600 dir_mode=0700 len=40 sha=")
        ids = set(re.findall(r"KVTRAIN_JOB_ID=(\w+)", out))
        self.assertEqual(len(ids), 1, out)
        self.assertIn("[worker 1] KVTRAIN_INSECURE=<unset>", out)
        self.assertNotIn("warning", out)
        # A second job gets another key and job id.
        code, out2 = launch(["-n", "1", "-s", "1"] + self.job())
        self.assertEqual(code, 0, out2)
        self.assertNotEqual(self.key_lines(out2)[0][1], lines[0][1])
        self.assertNotEqual(set(re.findall(r"KVTRAIN_JOB_ID=(\w+)", out2)), ids)

    def test_users_key_is_used_and_never_on_a_command_line(self):
        key = jobkey.new_secret_key()
        p = start_launch(["-n", "1", "-s", "1"] + self.job("--hang", "*"),
                         env={"KVTRAIN_JOB_KEY": key})
        out = read_until(p, "[worker 0] key:")
        if "[server 0] key:" not in out:
            out += read_until(p, "[server 0] key:")
        self.assertIn("sha=" + digest(key), out)
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            self.assertNotIn(key.encode(), cmd, "pid %s: %r" % (pid, cmd))
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        self.assertEqual(wait_no_processes(self.marker), [])

    def test_insecure_flag_and_variable_warn(self):
        for args, env in ((["--insecure"], {}), ([], {"KVTRAIN_INSECURE": "1"})):
            code, out = launch(["-n", "1", "-s", "1"] + args + self.job(), env=env)
            self.assertEqual(code, 0, out)
            self.assertIn("launch.py: warning:", out)
            self.assertIn("CURVE security is off", out)
            self.assertIn("[worker 0] KVTRAIN_INSECURE=1", out)
            self.assertIn("[worker 0] key: none", out)

    def test_keys_on_the_command_line_or_in_open_files_are_refused(self):
        code, out = launch(["-n", "1", "--env", "KVTRAIN_JOB_KEY=" + jobkey.new_secret_key()]
                           + self.job())
        self.assertEqual(code, 2, out)
        self.assertIn("KVTRAIN_JOB_KEY is set by launch.py", out)
        path = os.path.join(tempfile.mkdtemp(), "k")
        with open(path, "w") as f:
            f.write(jobkey.new_secret_key())
        os.chmod(path, 0o640)
        code, out = launch(["-n", "1"] + self.job(), env={"KVTRAIN_JOB_KEY_FILE": path})
        self.assertEqual(code, 2, out)
        self.assertIn("launch.py: error: KVTRAIN_JOB_KEY_FILE=%s: the job key file has "
                      "mode 0640" % path, out)
        self.assertNotIn("[scheduler 0]", out)


if __name__ == "__main__":
    pyunit.main()
