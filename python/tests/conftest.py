"""What the kvtrain package's tests share: where the repository's programs
are (the test's runfiles under `bazel test`, else this checkout) and a way
to run a real job of Python processes through tracker/launch.py."""

import os
import subprocess
import textwrap

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PY = "/usr/bin/python3"
# kvtrain's MXNet face (`import mxnet`).
COMPAT = os.path.join(ROOT, "python", "compat")


def compat_env():
    """The environment of a process running a script on kvtrain's MXNet face."""
    env = dict(os.environ)
    env["PYTHONPATH"] = "%s:%s" % (COMPAT, os.path.join(ROOT, "python"))
    return env
LAUNCH = os.path.join(ROOT, "tracker", "launch.py")
TRAIN_MNIST_CC = os.path.join(ROOT, "examples", "train_mnist")
if not os.path.exists(TRAIN_MNIST_CC):
    TRAIN_MNIST_CC = os.path.join(ROOT, "bazel-bin", "examples", "train_mnist")
TRAIN_MNIST_PY = os.path.join(ROOT, "examples", "python", "train_mnist.py")
MNIST_DIR = "/usr/share/datasets/fashion-mnist"
# Quick failure detection in the jobs the tests start.
JOB_ENV = ["--env", "PS_HEARTBEAT_INTERVAL=0.5", "--env", "PS_HEARTBEAT_TIMEOUT=3",
           "--env", "KVTRAIN_STARTUP_TIMEOUT=60"]


def job_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    return env


def launch(args, timeout=180):
    """Runs tracker/launch.py with `args`; returns (exit code, output)."""
    r = subprocess.run([PY, LAUNCH] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout, env=job_env(), cwd=ROOT)
    return r.returncode, r.stdout


def start_launch(args):
    return subprocess.Popen([PY, LAUNCH] + args, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=job_env(), cwd=ROOT)


@pytest.fixture
def script(tmp_path):
    """Writes a Python program (dedented) and returns its path."""
    count = [0]

    def write(text):
        count[0] += 1
        path = tmp_path / ("job%d.py" % count[0])
        path.write_text("import sys\nsys.path.insert(0, %r)\n" % os.path.join(ROOT, "python")
                        + textwrap.dedent(text))
        return str(path)
    return write


def processes_with(marker, role, rank=None):
    """PIDs of the job's processes of `role` (and `rank`) started with
    --env KVTRAIN_TEST_MARKER=<marker>."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if (b"KVTRAIN_TEST_MARKER=" + marker.encode()) in env and \
                (b"DMLC_ROLE=" + role.encode()) in env and \
                (rank is None or ("DMLC_RANK=%d" % rank).encode() in env):
            found.append(int(pid))
    return found


def lines_with(out, prefix):
    return [l for l in out.splitlines() if prefix in l]
