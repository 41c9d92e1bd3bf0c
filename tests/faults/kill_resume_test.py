"""SIGKILL one process of a dist_sync MLP job (launched by tracker/launch.py)
in the middle of epoch 2, then resume from epoch 1's checkpoint.

For a worker, a server and the scheduler: launch.py exits non-zero within the
heartbeat bound, names the dead process, and nothing of the job is left
running. Rerunning with --load-epoch 1 finishes, and the final weights (and
the servers' optimizer states) equal an uninterrupted run's."""

import os
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from tracker.launch_testlib import launch, new_marker, processes_with, start_launch
from tracker.launch_testlib import kill_marked, wait_no_processes
from tools import pyunit

TRAIN = os.path.abspath("examples/train_mnist")
CKPT = os.path.abspath("tools/kvtrain_checkpoint")
DATA = "/usr/share/datasets/fashion-mnist"
HEARTBEAT_TIMEOUT = 10
# The launcher notices a dead local child at once; a survivor notices a dead
# peer within PS_HEARTBEAT_TIMEOUT; the teardown takes a few seconds more.
DETECTION_BOUND = HEARTBEAT_TIMEOUT + 10
EPOCHS = 3
COMMON = ["--disp-batches=20", "--kv-store=dist_sync", "--network=mlp",
          "--num-examples=30000", "--batch-size=50", "--seed=5", "--lr-step-epochs=2"]
JOB = ["-n", "2", "-s", "2", "--env", "PS_HEARTBEAT_TIMEOUT=%d" % HEARTBEAT_TIMEOUT,
       "--env", "KVTRAIN_STARTUP_TIMEOUT=120"]


def role_of(pid):
    """('worker', 1) for a train_mnist process of the job, else None."""
    try:
        if os.path.basename(os.readlink("/proc/%d/exe" % pid)) != "train_mnist":
            return None
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return None
    role = env.get(b"DMLC_ROLE", b"").decode()
    rank = int(env.get(b"DMLC_RANK", b"0") or 0)
    return (role, 0 if role == "scheduler" else rank)


def read_lines_until(popen, pattern, timeout):
    """Reads launch.py's output until a line matches; returns what was read."""
    sel = selectors.DefaultSelector()
    sel.register(popen.stdout, selectors.EVENT_READ)
    seen = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not sel.select(timeout=0.2):
            continue
        line = popen.stdout.readline()
        if not line:
            break
        seen.append(line)
        if re.search(pattern, line):
            return "".join(seen)
    raise AssertionError("no line matching %r within %g s; output:\n%s"
                         % (pattern, timeout, "".join(seen)))


def same_weights(a, b):
    r = subprocess.run([CKPT, "diff", a, b, "--rtol=1e-5", "--atol=1e-6"],
                       capture_output=True, text=True)
    return r.returncode == 0, r.stdout + r.stderr


@unittest.skipUnless(os.path.isdir(DATA), "Fashion-MNIST is not installed (tools/setup.sh)")
class KillResumeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvtrain-kill-")
        code, out = launch(JOB + [TRAIN] + COMMON + [
            "--num-epochs=%d" % EPOCHS, "--model-prefix=%s/straight" % cls.tmp], timeout=900)
        assert code == 0, out

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def kill_and_resume(self, role, rank):
        marker = new_marker()
        d = os.path.join(self.tmp, marker)  # the marker is in every process's argv
        os.makedirs(d)
        prefix = d + "/split"
        p = start_launch(JOB + [TRAIN] + COMMON + [
            "--num-epochs=%d" % EPOCHS, "--model-prefix=" + prefix])
        try:
            out = read_lines_until(p, r"Epoch\[1\] Batch\[40\]", 600)
            self.assertTrue(os.path.exists(prefix + "-0001.params"), out)
            self.assertTrue(os.path.exists(prefix + "-0001.states"), out)
            self.assertFalse(os.path.exists(prefix + "-0002.params"), "killed too late")
            victims = [pid for pid in processes_with(marker) if role_of(pid) == (role, rank)]
            self.assertEqual(len(victims), 1, "processes: %s" % [
                (pid, role_of(pid)) for pid in processes_with(marker)])
            os.kill(victims[0], signal.SIGKILL)
            killed_at = time.monotonic()
            rest, _ = p.communicate(timeout=DETECTION_BOUND + 30)
            detected = time.monotonic() - killed_at
            out += rest
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        left = wait_no_processes(marker, timeout=15)
        kill_marked(marker)
        name = "%s %d" % (role, rank)  # launch.py's name: "scheduler 0", "worker 1"
        print("SIGKILL %s in epoch 2: launch.py exited %d after %.2f s" %
              (name, p.returncode, detected))
        self.assertNotEqual(p.returncode, 0, out)
        self.assertLess(detected, DETECTION_BOUND, out)
        self.assertIn("%s failed with signal SIGKILL" % name, out)
        self.assertEqual(left, [], "left running: %s" % left)

        code, out = launch(JOB + [TRAIN] + COMMON + [
            "--num-epochs=%d" % EPOCHS, "--load-epoch=1", "--model-prefix=" + prefix],
            timeout=900)
        self.assertEqual(code, 0, out)
        ok, report = same_weights(self.tmp + "/straight-%04d.params" % EPOCHS,
                                  prefix + "-%04d.params" % EPOCHS)
        print(report)
        self.assertTrue(ok, report)
        with open(self.tmp + "/straight-%04d.states" % EPOCHS, "rb") as a, \
                open(prefix + "-%04d.states" % EPOCHS, "rb") as b:
            self.assertEqual(a.read(), b.read(), "the servers' optimizer states differ")

    def test_kill_worker(self):
        self.kill_and_resume("worker", 1)

    def test_kill_server(self):
        self.kill_and_resume("server", 1)

    def test_kill_scheduler(self):
        self.kill_and_resume("scheduler", 0)


if __name__ == "__main__":
    pyunit.main()
