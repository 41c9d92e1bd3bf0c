"""Unit tests of the launcher's parts: hostfile, placement, environment,
scheduler address, argument checks, ssh and rsync command lines (the
processes it starts: supervisor_test.py)."""

import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hostfile  # noqa: E402
import launch  # noqa: E402
import launchers  # noqa: E402
import netaddr  # noqa: E402
from tools import pyunit  # noqa: E402


class HostfileTest(unittest.TestCase):
    def test_forms_comments_and_blank_lines(self):
        hosts = hostfile.parse_hostfile_text(
            "# cluster\n10.0.0.1\n\nnode2:2222   # custom port\n"
            "node3 slots=4\nnode4:23 slots=2\n")
        self.assertEqual(hosts, [hostfile.Host("10.0.0.1"), hostfile.Host("node2", 2222),
                                 hostfile.Host("node3", None, 4), hostfile.Host("node4", 23, 2)])

    def test_errors_name_file_and_line(self):
        cases = {
            "a\nbad/host\n": "hosts:2: cannot parse host 'bad/host'",
            "a slots=0\n": "hosts:1: slots must be a positive integer, got '0'",
            "a cores=2\n": "hosts:1: unknown option 'cores=2'",
            "a:99999\n": "hosts:1: ssh port 99999 out of range",
            "# only comments\n\n": "hosts: no hosts listed",
            # ssh would read these as options (-F: a config whose
            # ProxyCommand runs on this host).
            "a\n-Fcfg\n": "hosts:2: host '-Fcfg' begins with '-', which ssh and rsync "
                          "would take as an option",
            "-oProxyCommand=x:22 slots=1\n": "hosts:1: host '-oProxyCommand=x:22' begins "
                                              "with '-'",
        }
        for text, msg in cases.items():
            with self.assertRaises(hostfile.HostfileError) as cm:
                hostfile.parse_hostfile_text(text, "hosts")
            self.assertIn(msg, str(cm.exception))

    def test_missing_file(self):
        with self.assertRaises(hostfile.HostfileError) as cm:
            hostfile.parse_hostfile("/nonexistent/hosts")
        self.assertIn("cannot read hostfile /nonexistent/hosts", str(cm.exception))


class PlacementTest(unittest.TestCase):
    def names(self, placement):
        return [(r, k, h.name) for r, k, h in placement]

    def test_servers_first_then_workers_round_robin(self):
        hosts = [hostfile.Host("a"), hostfile.Host("b"), hostfile.Host("c")]
        self.assertEqual(self.names(hostfile.place(hosts, 2, 3)), [
            ("server", 0, "a"), ("server", 1, "b"),
            ("worker", 0, "c"), ("worker", 1, "a"), ("worker", 2, "b")])

    def test_one_host_takes_everything(self):
        # apache/mxnet#17470: fewer hosts than processes must not hang.
        placement = hostfile.place([hostfile.Host("localhost")], 2, 2)
        self.assertEqual(len(placement), 4)
        self.assertTrue(all(h.name == "localhost" for _, _, h in placement))

    def test_slots_are_respected(self):
        hosts = [hostfile.Host("a", slots=1), hostfile.Host("b", slots=3)]
        self.assertEqual(self.names(hostfile.place(hosts, 1, 3)), [
            ("server", 0, "a"), ("worker", 0, "b"), ("worker", 1, "b"),
            ("worker", 2, "b")])

    def test_too_few_slots_is_an_error(self):
        hosts = [hostfile.Host("a", slots=1), hostfile.Host("b", slots=2)]
        with self.assertRaises(hostfile.HostfileError) as cm:
            hostfile.place(hosts, 2, 2)
        self.assertIn("needs 4 processes (2 servers, 2 workers) but the hostfile's "
                      "hosts offer 3 slots", str(cm.exception))


class EnvTest(unittest.TestCase):
    def spec(self, **kw):
        environ = {"DMLC_INTERFACE": "eth1", "PS_VERBOSE": "1", "HOME": "/root",
                   "LD_LIBRARY_PATH": "/opt/lib", "OMP_NUM_THREADS": "1",
                   "KVTRAIN_NUM_THREADS": "2", "DMLC_ROLE": "stale"}
        s = launchers.JobSpec(["prog"], 2, 3, environ=environ, **kw)
        s.root_uri, s.root_port = "10.0.0.1", 9091
        return s

    def node_host(self, spec):
        """DMLC_NODE_HOST in the ssh script of worker 0 on host `h1`, or None."""
        (proc,) = launchers.ssh_procs(spec, [("worker", 0, hostfile.Host("h1"))], [], "/w")
        m = re.search(r"export DMLC_NODE_HOST=(\S+)", proc.stdin_data)
        return m and m.group(1)

    def test_interface_wins_over_the_hostfile_name(self):
        # The launcher's environment names an interface: the node advertises
        # its address, so no hostfile name (nor a stale DMLC_NODE_HOST).
        spec = self.spec()
        spec.environ["DMLC_NODE_HOST"] = "stale-host"
        self.assertIsNone(self.node_host(spec))
        spec = self.spec(env_worker={"DMLC_NODE_HOST": "chosen"})
        self.assertEqual(self.node_host(spec), "chosen")
        spec = self.spec()
        del spec.environ["DMLC_INTERFACE"]
        self.assertEqual(self.node_host(spec), "h1")

    def test_job_variables(self):
        env = self.spec().role_env("worker", 1)
        self.assertEqual(env["DMLC_ROLE"], "worker")
        self.assertEqual(env["DMLC_RANK"], "1")
        self.assertEqual(env["DMLC_PS_ROOT_URI"], "10.0.0.1")
        self.assertEqual(env["DMLC_PS_ROOT_PORT"], "9091")
        self.assertEqual(env["DMLC_NUM_WORKER"], "2")
        self.assertEqual(env["DMLC_NUM_SERVER"], "3")

    def test_forwarding(self):
        env = self.spec().role_env("server", 0)
        for k in ("DMLC_INTERFACE", "PS_VERBOSE", "LD_LIBRARY_PATH", "OMP_NUM_THREADS",
                  "KVTRAIN_NUM_THREADS"):
            self.assertIn(k, env)
        self.assertNotIn("HOME", env)
        self.assertEqual(env["DMLC_ROLE"], "server")  # never the launcher's own

    def test_env_flags_per_role(self):
        s = self.spec(env_all={"A": "1", "B": "all"}, env_server={"B": "server"},
                      env_worker={"C": "worker"})
        server, worker, sched = (s.role_env("server", 0), s.role_env("worker", 0),
                                 s.role_env("scheduler", 0))
        self.assertEqual((server["A"], server["B"]), ("1", "server"))
        self.assertNotIn("C", server)
        self.assertEqual((worker["A"], worker["B"], worker["C"]), ("1", "all", "worker"))
        self.assertEqual(sched["B"], "all")

    def test_env_arg_errors(self):
        self.assertEqual(launchers.parse_env_args(["K=a=b", "E="], "--env"),
                         {"K": "a=b", "E": ""})
        # MXNet's NAME:VALUE form; the first separator after the name counts.
        self.assertEqual(launchers.parse_env_args(["OMP_NUM_THREADS:4", "U:http://h:1",
                                                   "Q=a:b"], "--env-server"),
                         {"OMP_NUM_THREADS": "4", "U": "http://h:1", "Q": "a:b"})
        for bad, msg in (("novalue", "--env 'novalue': expected NAME=VALUE"),
                         ("1X=2", "--env '1X=2': '1X' is not a variable name (letters, "
                                  "digits and _, not starting with a digit)"),
                         ("A;touch x=1", "--env 'A;touch x=1': 'A;touch x' is not a "
                                         "variable name"),
                         ("$(id):v", "--env '$(id):v': '$(id)' is not a variable name"),
                         ("DMLC_ROLE=server", "DMLC_ROLE is set by launch.py")):
            with self.assertRaises(launchers.LaunchError) as cm:
                launchers.parse_env_args([bad], "--env")
            self.assertIn(msg, str(cm.exception))


    def test_names_that_would_reach_a_process_are_shell_names(self):
        # The launcher's own variables (forwarded ones only) and the flags'.
        spec = self.spec()
        spec.environ["NOT-FORWARDED"] = "1"  # reaches local processes only, as is
        spec.check_names()
        spec.environ["KVTRAIN_X;touch /tmp/p"] = "1"
        with self.assertRaises(launchers.LaunchError) as cm:
            spec.check_names()
        self.assertIn("launch.py's environment has a variable named 'KVTRAIN_X;touch /tmp/p'",
                      str(cm.exception))
        spec = self.spec(env_worker={"A B": "1"})
        with self.assertRaisesRegex(launchers.LaunchError, "'A B' is not a variable name"):
            spec.check_names()
        # The script refuses one too, whoever builds it.
        with self.assertRaisesRegex(launchers.LaunchError, "'X;id' is not a variable name"):
            launchers.remote_script({"X;id": "1"}, "/", ["true"])


class SshCommandLineTest(unittest.TestCase):
    """The argv of ssh and rsync as the ssh launcher builds them."""

    def spec(self):
        spec = launchers.JobSpec(["prog"], 1, 0, environ={})
        spec.root_uri, spec.root_port = "10.0.0.1", 9091
        return spec

    def argv(self, host, ssh_args=(), strict=False):
        (proc,) = launchers.ssh_procs(self.spec(), [("worker", 0, host)], list(ssh_args),
                                      "/w", strict)
        return proc.argv

    def test_options_end_before_the_host(self):
        self.assertEqual(self.argv(hostfile.Host("h1", 2222), ["-i", "key"]),
                         ["ssh", "-T", "-i", "key", "-o", "BatchMode=yes",
                          "-o", "StrictHostKeyChecking=accept-new", "-p", "2222",
                          "--", "h1", "bash", "-s"])
        with self.assertRaisesRegex(launchers.LaunchError,
                                    "host '-Fcfg' begins with '-'"):
            self.argv(hostfile.Host("-Fcfg"))

    def test_host_key_policy(self):
        def first(argv):  # ssh keeps the first value of an option
            return next(a for a in argv if a.startswith("StrictHostKeyChecking="))
        self.assertEqual(first(self.argv(hostfile.Host("h"))),
                         "StrictHostKeyChecking=accept-new")
        # Strict comes before --ssh-arg: no --ssh-arg weakens it.
        argv = self.argv(hostfile.Host("h"), ["-o", "StrictHostKeyChecking=no"], strict=True)
        self.assertEqual(first(argv), "StrictHostKeyChecking=yes")
        on, off = launchers.strict_host_keys_requested, launchers.STRICT_HOST_KEYS_VAR
        self.assertTrue(on({off: "1"}))
        self.assertFalse(on({off: "0"}))
        self.assertFalse(on({}))
        with self.assertRaisesRegex(launchers.LaunchError,
                                    "KVTRAIN_SSH_STRICT_HOST_KEYS='maybe': expected 1 or 0"):
            on({off: "maybe"})

    def test_a_restarted_process_runs_through_ssh_on_the_same_host(self):
        spec = self.spec()
        spec.env_worker = {"KVT_W": "w"}
        (proc,) = launchers.ssh_procs(spec, [("worker", 0, hostfile.Host("h1", 2222))],
                                      ["-i", "key"], "/w dir")
        again = proc.again({"KVTRAIN_RESTART": "2"})
        self.assertEqual((again.role, again.rank, again.host, again.remote),
                         ("worker", 0, "h1", True))
        self.assertEqual(again.argv, proc.argv)
        self.assertEqual(again.env, proc.env)
        # The new variable travels in the script, with everything the first had.
        self.assertEqual(again.stdin_data,
                         proc.stdin_data.replace("  export KVT_W=w\n",
                                                 "  export KVTRAIN_RESTART=2\n  export KVT_W=w\n"))
        self.assertNotIn("KVTRAIN_RESTART", proc.stdin_data)
        self.assertNotIn("KVTRAIN_RESTART", " ".join(again.argv))

    def test_rsync_command_line(self):
        calls = []
        orig_run, orig_which = launchers.subprocess.run, launchers.shutil.which

        def fake_run(argv, **kw):
            calls.append(argv)
            return subprocess.CompletedProcess(argv, 0, "", "")
        launchers.subprocess.run = fake_run
        launchers.shutil.which = lambda name: "/usr/bin/" + name
        try:
            launchers.sync_dir([hostfile.Host("h", 23), hostfile.Host("fd00::1")], ["-i", "k"],
                               "/dst dir", lambda msg: None, strict_host_keys=True)
        finally:
            launchers.subprocess.run, launchers.shutil.which = orig_run, orig_which
        self.assertEqual(calls[0][:4], ["rsync", "-az", "--mkpath", "-e"])
        self.assertEqual(calls[0][5:], ["--", "./", "h:/dst dir/"])
        # rsync appends the host after the ssh command's `--`.
        self.assertEqual(calls[0][4], "ssh -T -o StrictHostKeyChecking=yes -i k -o BatchMode=yes "
                         "-o StrictHostKeyChecking=accept-new -p 23 --")
        self.assertEqual(calls[1][-1], "[fd00::1]:/dst dir/")

    def test_launch_refuses_a_dash_host_naming_file_and_line(self):
        with tempfile.NamedTemporaryFile("w", suffix="-hosts") as f:
            f.write("# hosts\n10.0.0.1\n-Fcfg slots=2\n")
            f.flush()
            r = subprocess.run([sys.executable, launch.__file__, "-n", "1", "-H", f.name,
                                "true"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("launch.py: error: %s:3: host '-Fcfg' begins with '-'" % f.name,
                      r.stderr)


class AddressTest(unittest.TestCase):
    def test_rule(self):
        self.assertEqual(netaddr.scheduler_address("10.1.2.3", "lo", ["h"]), "10.1.2.3")
        self.assertEqual(netaddr.scheduler_address(None, "lo", []), "127.0.0.1")
        self.assertEqual(netaddr.scheduler_address(None, None, []), "127.0.0.1")
        self.assertEqual(netaddr.scheduler_address(None, None, ["127.0.0.1"]), "127.0.0.1")

    def test_loopback_refused_for_remote_hosts(self):
        with self.assertRaises(netaddr.AddressError) as cm:
            netaddr.scheduler_address(None, "lo", ["10.9.9.9"])
        self.assertIn("which the remote hosts (10.9.9.9) cannot reach", str(cm.exception))

    def test_unknown_interface_lists_existing_ones(self):
        with self.assertRaises(netaddr.AddressError) as cm:
            netaddr.interface_ipv4("nosuchnic0")
        self.assertIn("DMLC_INTERFACE=nosuchnic0: no such interface; interfaces here:",
                      str(cm.exception))
        self.assertIn("lo", str(cm.exception))

    def test_unresolvable_host(self):
        with self.assertRaises(netaddr.AddressError):
            netaddr.route_source("no-such-host.invalid")


class ArgsTest(unittest.TestCase):
    def error_of(self, argv):
        r = subprocess.run([sys.executable, launch.__file__] + argv,
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        return r.stderr

    def test_bad_arguments(self):
        self.assertIn("no command given", self.error_of(["-n", "2"]))
        self.assertIn("-n must be at least 1", self.error_of(["-n", "0", "x"]))
        self.assertIn("--launcher ssh needs -H/--hostfile",
                      self.error_of(["-n", "1", "--launcher", "ssh", "x"]))
        self.assertIn("launch.py: error: command not found: no-such-program-kvt",
                      self.error_of(["-n", "1", "no-such-program-kvt"]))
        self.assertIn("--env 'x': expected NAME=VALUE",
                      self.error_of(["-n", "1", "--env", "x", "true"]))
        self.assertIn("--ssh-strict-host-keys works with --launcher ssh only",
                      self.error_of(["-n", "1", "--ssh-strict-host-keys", "true"]))
        self.assertIn("--server-replicas must be 0 or less than -s (2), got 2",
                      self.error_of(["-n", "1", "-s", "2", "--server-replicas", "2", "true"]))
        self.assertIn("--server-replicas works with --launcher local and ssh",
                      self.error_of(["-n", "1", "-s", "2", "--server-replicas", "1",
                                     "--launcher", "mpi", "-H", "hosts", "true"]))
        self.assertIn("--max-restarts must be 0 or more, got -1",
                      self.error_of(["-n", "1", "--max-restarts", "-1", "true"]))
        for launcher in ("mpi", "slurm"):
            err = " ".join(self.error_of(["-n", "1", "--max-restarts", "1", "--launcher",
                                          launcher, "-H", "hosts", "true"]).split())
            self.assertIn("--max-restarts works with --launcher local and ssh (mpirun and "
                          "srun end every rank of a job when one dies, so they cannot start "
                          "one again)", err)
        # 0 is every launcher's default.
        self.assertEqual(launch.parse_args(["-n", "1", "--launcher", "mpi", "true"])
                         .max_restarts, 0)

    def prepared(self, argv):
        """A local Launcher after prepare() (nothing started)."""
        launcher = launch.Launcher(launch.parse_args(argv))
        self.addCleanup(shutil.rmtree, launcher.port_dir, ignore_errors=True)
        launcher.sup.out = io.BytesIO()  # its log lines
        launcher.prepare()
        launcher.spec.root_port = 9091
        return launcher

    def test_max_restarts_reach_every_process_and_the_supervisor(self):
        launcher = self.prepared(["-n", "2", "-s", "1", "--max-restarts", "3", "true"])
        self.assertEqual(launcher.sup.restarts, {"worker": 3})
        self.assertEqual(launcher.sup.tolerate, {})  # servers are not restarted
        for role in ("scheduler", "server", "worker"):
            self.assertEqual(launcher.spec.role_env(role, 0)["KVTRAIN_WORKER_RESTARTS"], "3",
                             role)
        for proc in launcher.procs():
            self.assertEqual(proc.env["KVTRAIN_WORKER_RESTARTS"], "3", proc.name)
        launcher = self.prepared(["-n", "2", "-s", "1", "true"])
        self.assertEqual(launcher.sup.restarts, {})
        for proc in launcher.procs():
            self.assertNotIn("KVTRAIN_WORKER_RESTARTS", proc.env, proc.name)

    def test_defaults(self):
        a = launch.parse_args(["-n", "3", "prog", "--kv-store", "dist_sync"])
        self.assertEqual((a.num_workers, a.num_servers, a.launcher), (3, 3, "local"))
        self.assertEqual(a.command, ["prog", "--kv-store", "dist_sync"])
        # MXNet's default: with a hostfile and no --launcher, ssh.
        a = launch.parse_args(["-n", "2", "-H", "hosts", "--sync-dst-dir", "/tmp/x", "prog"])
        self.assertEqual((a.launcher, a.num_servers), ("ssh", 2))

    def test_unknown_options_go_to_the_command_as_in_mxnet(self):
        # MXNet's launch.py: parse_known_args, then command += unknown.
        a = launch.parse_args(["-n", "2", "--kv-store=dist_sync", "--launcher", "local",
                               "prog", "--network", "lenet"])
        self.assertEqual(a.command, ["prog", "--network", "lenet", "--kv-store=dist_sync"])
        self.assertEqual(a.launcher, "local")
        r = subprocess.run([sys.executable, launch.__file__, "-n", "1", "--batch-size=8",
                            "--launcher", "local", "--insecure", "-s", "0", "sh", "-c",
                            'echo "got $0"'],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("got --batch-size=8", r.stdout)
        self.assertIn("passing --batch-size=8 on to the command", r.stderr)

    def test_mxnet_only_options_are_named_not_passed_on(self):
        for argv, name in ((["-SH", "hosts"], "-SH"), (["--p3"], "--p3"),
                           (["--byteps-launch"], "--byteps-launch"),
                           (["--scheduler-port=2333"], "--scheduler-port"),
                           (["--server-hostfile", "h"], "--server-hostfile")):
            err = self.error_of(["-n", "1"] + argv + ["true"])
            self.assertIn("launch.py: error: %s: " % name, err)

    def test_mxnet_launchers_that_kvtrain_lacks_say_what_to_use(self):
        for name in ("sge", "yarn"):
            err = self.error_of(["-n", "1", "--launcher", name, "true"])
            self.assertIn("--launcher %s: kvtrain has no" % name, err)
            self.assertIn("use --launcher ssh -H hosts", err)

    def test_bare_program_in_the_working_directory(self):
        d = tempfile.mkdtemp()
        prog = os.path.join(d, "train_kvt_example")
        with open(prog, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(prog, 0o755)
        cwd = os.getcwd()
        os.chdir(d)
        try:
            self.assertEqual(launchers.resolve_command(["train_kvt_example", "--x"]),
                             ["./train_kvt_example", "--x"])
            self.assertEqual(launchers.resolve_command(["sh", "-c", "true"])[0], "sh")
            with self.assertRaisesRegex(launchers.LaunchError, "command not found: nope"):
                launchers.resolve_command(["nope"])
        finally:
            os.chdir(cwd)

    def test_help_has_examples(self):
        r = subprocess.run([sys.executable, launch.__file__, "-h"], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0)
        self.assertIn("--launcher ssh -H hosts", r.stdout)
        self.assertIn("DMLC_INTERFACE=eth1", r.stdout)
        self.assertIn("(default: ssh with -H, else local)", " ".join(r.stdout.split()))
        self.assertIn("--launcher slurm", r.stdout)

    def test_slurm_command_lines(self):
        # One srun per role; the rank from SLURM_PROCID; --slurm-arg passed
        # through; the job key only in srun's environment.
        spec = launchers.JobSpec(["./prog", "--x"], 2, 1, environ={"PATH": os.environ["PATH"]})
        spec.root_uri, spec.root_port = "10.0.0.1", 9091
        spec.security_env = {"KVTRAIN_JOB_KEY": "secret-key"}
        orig = launchers.shutil.which
        launchers.shutil.which = lambda name: "/usr/bin/" + name
        try:
            procs = launchers.slurm_procs(spec, ["--partition=gpu"])
        finally:
            launchers.shutil.which = orig
        self.assertEqual([p.name for p in procs], ["server group (srun)", "worker group (srun)"])
        worker = procs[1]
        self.assertIn("--ntasks=2", worker.argv)
        self.assertIn("--partition=gpu", worker.argv)
        self.assertIn("--kill-on-bad-exit=1", worker.argv)
        self.assertIn("${SLURM_PROCID:-0}", " ".join(worker.argv))
        self.assertEqual(worker.argv[-2:], ["./prog", "--x"])
        self.assertNotIn("secret-key", " ".join(worker.argv))
        self.assertEqual(worker.env["KVTRAIN_JOB_KEY"], "secret-key")
        self.assertEqual(worker.env["DMLC_ROLE"], "worker")
        self.assertNotIn("DMLC_RANK", worker.env)
        self.assertEqual(worker.split_label(b" 1: hello\n"), ("worker 1", b"hello\n"))


if __name__ == "__main__":
    pyunit.main()
