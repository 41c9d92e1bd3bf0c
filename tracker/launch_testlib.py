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


def _stat(pid):
    """(state, parent PID) of a live process, or None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def children_of(pid):
    """PIDs of the live (not zombie) direct children of `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st and st[1] == pid and st[0] != "Z":
                found.append(int(entry))
    return found


def wait_gone(pids, timeout):
    """Waits until none of `pids` runs (a zombie counts as gone: whoever
    adopted it may not reap it); returns those still running."""
    end = time.monotonic() + timeout
    while True:
        left = [p for p in pids if (_stat(p) or ("Z",))[0] != "Z"]
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.05)


def node_pid(marker, role, rank, program=None):
    """The PID of the job's process of `role` and `rank` (from its
    environment; `program`: its name in /proc/PID/comm, to pass over
    launcher processes that carry the same variables), or None."""
    found = None
    for pid in processes_with(marker):
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%d/comm" % pid) as f:
                comm = f.read().strip()
        except OSError:
            continue
        if (program is None or comm == program) and \
                ("DMLC_ROLE=%s" % role).encode() in env and \
                ("DMLC_RANK=%d" % rank).encode() in env:
            found = pid
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
    """Reads launch.py's output until a line contains `needle`; returns the
    output read so far up to that line (raises AssertionError on timeout or
    EOF). Reads the pipe's descriptor itself: a buffered readline after
    select() would leave lines that arrived together in Python's buffer,
    where select() no longer sees them. Lines read past the needle are kept
    for the next call."""
    import selectors
    fd = popen.stdout.fileno()
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    pending = getattr(popen, "_read_until_pending", b"")
    seen = []
    end = time.monotonic() + timeout
    try:
        while True:
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                seen.append(line.decode(errors="replace") + "\n")
                if needle in seen[-1]:
                    return "".join(seen)
            if time.monotonic() >= end:
                break
            if not sel.select(timeout=0.2):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            pending += chunk
    finally:
        popen._read_until_pending = pending
        sel.close()
    seen.append(pending.decode(errors="replace"))
    raise AssertionError("did not see %r; output:\n%s" % (needle, "".join(seen)))
