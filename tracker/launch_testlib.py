"""Helpers for the launcher's tests: run launch.py as a real process, and
find processes left behind by a job (by a marker token in their argv)."""

import os
import signal
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.join(HERE, "launch.py")
FAKE_JOB = os.path.join(HERE, "testdata", "fake_job.py")


def new_marker():
    return "kvtmark-" + uuid.uuid4().hex[:12]


def processes_with(marker):
    """PIDs (other than ours) whose command line contains `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read()
            with open("/proc/%s/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmd and state != "Z":
            found.append(int(pid))
    return found


def wait_no_processes(marker, timeout=15):
    """Waits until nothing with `marker` runs; returns what is left."""
    end = time.monotonic() + timeout
    left = processes_with(marker)
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = processes_with(marker)
    return left


def kill_marked(marker):
    for pid in processes_with(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def launch(args, timeout=120, env=None, cwd=None):
    """Runs launch.py to completion: returns (exit code, combined output)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    r = subprocess.run([sys.executable, LAUNCH] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout, env=full_env,
                       cwd=cwd, text=True)
    return r.returncode, r.stdout


def start_launch(args, env=None):
    """Starts launch.py and returns its Popen (output piped, text)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.Popen([sys.executable, LAUNCH] + args, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=full_env, text=True)


def read_until(popen, needle, timeout=60):
    """Reads launch.py's output until a line contains `needle`; returns all
    output read so far (raises AssertionError on timeout or EOF)."""
    import selectors
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
        if needle in line:
            return "".join(seen)
    raise AssertionError("did not see %r; output:\n%s" % (needle, "".join(seen)))
