"""tracker/launch.py running real kvtrain jobs (the transport's test node):
local, over ssh to a real sshd on 127.0.0.1, across two network namespaces
with DMLC_INTERFACE naming their veth device (the hostfile naming each host
by another address), and through Open MPI's mpirun;
a remote worker SIGKILLed mid-traffic ends the job, with nothing left."""

import os
import re
import shutil
import signal
import sys
import tempfile
import time
import unittest

from tracker import testbed
from tracker.launch_testlib import (kill_marked, launch, new_marker, node_pid,
                                    read_until, start_launch, wait_no_processes)
from tools import pyunit

NODE = os.path.abspath("tests/ps/ps_test_node")
JOB_ENV = ["--env", "PS_HEARTBEAT_INTERVAL=0.5", "--env", "PS_HEARTBEAT_TIMEOUT=3",
           "--env", "KVTRAIN_STARTUP_TIMEOUT=60"]


def node(marker, *args):
    # The marker travels as an ignored flag value so `ps` finds the job.
    return [NODE, "--marker_for_tests=" + marker] + list(args)


class LocalRealJobTest(unittest.TestCase):
    def test_two_by_two_job_with_true_rank_prefixes(self):
        marker = new_marker()
        code, out = launch(["-n", "2", "-s", "2"] + JOB_ENV + node(marker, "--rounds=2"))
        self.assertEqual(code, 0, out)
        for r in (0, 1):
            self.assertIn("[worker %d] ps_test_node: worker %d (127.0.0.1:" % (r, r), out)
            self.assertIn("[server %d] ps_test_node: server %d (127.0.0.1:" % (r, r), out)
            self.assertIn("[worker %d] ps_test_node: one big key round 2" % r, out)
        self.assertEqual(wait_no_processes(marker), [])

    def test_insecure_job_runs_and_warns(self):
        marker = new_marker()
        code, out = launch(["-n", "1", "-s", "1", "--insecure"] + JOB_ENV
                           + node(marker, "--rounds=1"))
        self.assertEqual(code, 0, out)
        self.assertIn("launch.py: warning: --insecure: CURVE security is off", out)
        for name in ("scheduler 0", "server 0", "worker 0"):
            self.assertIn("KVTRAIN_INSECURE=1: CURVE security is off", "\n".join(
                l for l in out.splitlines() if l.startswith("[%s]" % name)))
        self.assertIn("[worker 0] ps_test_node: one big key round 1", out)


class SshRealJobTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(testbed.SSHD):
            raise unittest.SkipTest("openssh-server is not installed")
        cls.dir = testbed.temp_dir()
        cls.sshd = testbed.SshServer(cls.dir).start()
        cls.hostfile = os.path.join(cls.dir, "hosts")
        with open(cls.hostfile, "w") as f:
            f.write("127.0.0.1:%d\n" % cls.sshd.port)

    @classmethod
    def tearDownClass(cls):
        cls.sshd.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def base(self):
        return (["-n", "2", "-s", "2", "--launcher", "ssh", "-H", self.hostfile]
                + ["--ssh-arg=%s" % a for a in self.sshd.client_args()] + JOB_ENV)

    def test_two_by_two_job(self):
        marker = new_marker()
        code, out = launch(self.base() + ["--env", "PS_VERBOSE=1"]
                           + node(marker, "--rounds=2"))
        self.assertEqual(code, 0, out)
        self.assertIn("[worker 1] ps_test_node: many small keys round 2", out)
        # Secure by default: all five processes hold the same job key, which
        # reached the remote ones through ssh's stdin.
        keys = set(re.findall(r"CURVE security on, job key (\S+)", out))
        self.assertEqual(len(keys), 1, out)
        self.assertEqual(out.count("CURVE security on, job key"), 5, out)
        self.assertEqual(wait_no_processes(marker), [])

    def test_python_training_script(self):
        # MXNet's command from its distributed-training page, with
        # `python3 examples/python/train_mnist.py` for `python train_mnist.py`.
        code, out = launch(self.base() + [
            "/usr/bin/python3", os.path.abspath("examples/python/train_mnist.py"),
            "--network", "lenet", "--kv-store", "dist_sync", "--num-epochs", "1",
            "--num-examples", "1000", "--disp-batches", "0"], timeout=300)
        self.assertEqual(code, 0, out)
        accuracies = re.findall(r"\[worker (\d)\] Test accuracy=(\S+)", out)
        self.assertEqual(sorted(r for r, _ in accuracies), ["0", "1"], out)
        self.assertEqual(len(set(a for _, a in accuracies)), 1, out)

    def test_sigkilled_remote_worker_ends_the_job(self):
        marker = new_marker()
        p = start_launch(self.base() + node(marker, "--scenario=traffic"))
        read_until(p, "[worker 1] ps_test_node: traffic running", timeout=120)
        victim = node_pid(marker, "worker", 1)
        self.assertIsNotNone(victim)
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        out, _ = p.communicate(timeout=60)
        elapsed = time.monotonic() - killed
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("worker 1 on 127.0.0.1 failed with exit code 137 (SIGKILL)", out)
        # Within the heartbeat bound (3 s) plus a few seconds.
        self.assertLess(elapsed, 15, out)
        self.assertEqual(wait_no_processes(marker), [], out)


@unittest.skipUnless(testbed.NetnsBed.available(), "network namespaces cannot be created here")
class NetnsRealJobTest(unittest.TestCase):
    """Two 'hosts' in their own network namespaces, bridged to this one."""

    def test_nodes_advertise_their_interface_address(self):
        # The hostfile names each host by its second address; DMLC_INTERFACE
        # names the interface whose own (first) address every node must
        # advertise, so the parameter traffic takes the NIC the user chose.
        bed = testbed.NetnsBed(2).setup()
        workdir = testbed.temp_dir()
        servers = []
        try:
            for ns, alias in zip(bed.namespaces, bed.alias_addrs):
                servers.append(testbed.SshServer(workdir, addr=alias, port=22, netns=ns).start())
            hostfile = os.path.join(workdir, "hosts")
            with open(hostfile, "w") as f:
                f.write("".join(a + "\n" for a in bed.alias_addrs))
            marker = new_marker()
            code, out = launch(
                ["-n", "2", "-s", "2", "--launcher", "ssh", "-H", hostfile,
                 "--env", "DMLC_INTERFACE=" + bed.ifname, "--env", "PS_VERBOSE=1"]
                + ["--ssh-arg=%s" % a for a in servers[0].client_args()] + JOB_ENV
                + node(marker, "--rounds=1"), timeout=300)
            self.assertEqual(code, 0, out)
            # The scheduler took the interface's address in this namespace
            # and heard every node advertise its own namespace's interface
            # address, never the hostfile's name for it.
            self.assertIn("scheduler at %s:" % bed.root_addr, out)
            for addr, alias in zip(bed.addrs, bed.alias_addrs):
                self.assertRegex(out, r"registered a (server|worker) at %s:\d+" % addr)
                self.assertNotRegex(out, r"registered a (server|worker) at %s:" % alias)
            self.assertIn("launch.py: server 0 -> %s" % bed.alias_addrs[0], out)
            self.assertIn("launch.py: server 1 -> %s" % bed.alias_addrs[1], out)
            self.assertIn("[worker 0] ps_test_node: one big key round 1", out)
            self.assertEqual(wait_no_processes(marker), [])
        finally:
            for s in servers:
                s.stop()
            bed.teardown()
            shutil.rmtree(workdir, ignore_errors=True)


@unittest.skipUnless(shutil.which("mpirun"), "mpirun is not installed")
class MpiRealJobTest(unittest.TestCase):
    def test_two_by_two_job(self):
        marker = new_marker()
        code, out = launch(["-n", "2", "-s", "2", "--launcher", "mpi"] + JOB_ENV
                           + node(marker, "--rounds=1"), timeout=180)
        self.assertEqual(code, 0, out)
        for r in (0, 1):
            self.assertIn("[worker %d] ps_test_node: worker %d (" % (r, r), out)
        self.assertEqual(wait_no_processes(marker), [])


if __name__ == "__main__":
    pyunit.main()
