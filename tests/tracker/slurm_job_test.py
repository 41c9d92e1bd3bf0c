"""tracker/launch.py --launcher slurm against a real single-node Slurm
(Debian's munged, slurmctld and slurmd, started here with a throw-away
configuration on 127.0.0.1): a 2-worker, 2-server dist_sync training job, a
task SIGKILLed mid-traffic that ends the job with nothing left, and launch.py
itself SIGKILLed, which leaves nothing either. Skipped where the daemons are
not installed or cannot start."""

import os
import re
import shutil
import signal
import sys
import time
import unittest

from tracker import testbed
from tracker.launch_testlib import (FAKE_JOB, children_of, kill_marked, launch,
                                    new_marker, node_pid, read_until, start_launch,
                                    wait_gone, wait_no_processes)
from tools import pyunit

NODE = os.path.abspath("tests/ps/ps_test_node")
TRAIN = os.path.abspath("examples/train_mnist")
JOB_ENV = ["--env", "PS_HEARTBEAT_INTERVAL=0.5", "--env", "PS_HEARTBEAT_TIMEOUT=3",
           "--env", "KVTRAIN_STARTUP_TIMEOUT=60"]


@unittest.skipUnless(testbed.SlurmCluster.available(),
                     "Slurm is not installed (slurmctld, slurmd, munge) or not root")
class SlurmJobTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = testbed.temp_dir()
        cls.cluster = testbed.SlurmCluster(cls.dir)
        try:
            cls.cluster.start()
        except RuntimeError as e:
            cls.cluster.stop()
            raise unittest.SkipTest("Slurm could not start here: %s" % e)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def args(self):
        return ["-n", "2", "-s", "2", "--launcher", "slurm"] + JOB_ENV

    def test_two_by_two_dist_sync_training(self):
        marker = new_marker()
        code, out = launch(
            self.args() + ["--env", "PS_VERBOSE=1", TRAIN,
                           "--undefok=marker_for_tests", "--marker_for_tests=" + marker,
                           "--kv-store=dist_sync", "--num-epochs=1", "--num-examples=2000",
                           "--disp-batches=0"],
            timeout=300, env=self.cluster.env())
        self.assertEqual(code, 0, out)
        self.assertIn("(slurm launcher)", out)
        for r in (0, 1):
            self.assertRegex(out, r"\[worker %d\] Test accuracy=0\.\d+" % r)
        # Every task got the job's one key through srun's environment.
        keys = set(re.findall(r"CURVE security on, job key (\S+)", out))
        self.assertEqual(len(keys), 1, out)
        self.assertEqual(out.count("CURVE security on, job key"), 5, out)
        self.assertEqual(wait_no_processes(marker), [], out)

    def test_killed_task_ends_the_job(self):
        marker = new_marker()
        p = start_launch(self.args() + [NODE, "--marker_for_tests=" + marker,
                                        "--scenario=traffic"], env=self.cluster.env())
        try:
            read_until(p, "[worker 1] ps_test_node: traffic running", timeout=120)
            victim = node_pid(marker, "worker", 1, program="ps_test_node")
            self.assertIsNotNone(victim)
            killed = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            out, _ = p.communicate(timeout=60)
            elapsed = time.monotonic() - killed
            self.assertNotEqual(p.returncode, 0, out)
            self.assertIn("worker group (srun) failed", out)
            self.assertLess(elapsed, 20, out)
            self.assertEqual(wait_no_processes(marker), [], out)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
            kill_marked(marker)

    def test_sigkilled_launcher_leaves_nothing_running(self):
        # The kernel sends each srun SIGTERM (PR_SET_PDEATHSIG) when
        # launch.py dies; srun passes it to its tasks.
        marker = new_marker()
        p = start_launch(["-n", "2", "-s", "1", "--launcher", "slurm", sys.executable, FAKE_JOB,
                          "--marker", marker, "--hang", "*"], env=self.cluster.env())
        try:
            read_until(p, "scheduler: all 3 nodes checked in", timeout=120)
            children = children_of(p.pid)
            self.assertGreaterEqual(len(children), 2, children)  # the sruns
            p.kill()
            p.wait(timeout=10)
            self.assertEqual(wait_gone(children, 10), [], "still running 10 s after the SIGKILL")
            self.assertEqual(wait_no_processes(marker, 10), [])
        finally:
            if p.poll() is None:
                p.kill()
            p.communicate()
            kill_marked(marker)


if __name__ == "__main__":
    pyunit.main()
