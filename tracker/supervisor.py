"""Runs a job's processes and watches them: prefixes every output line with
the process's role and rank, and when any process fails (non-zero exit or
signal), the job times out, or the launcher gets SIGINT/SIGTERM, stops every
other process and reports which one failed with its last lines. One thread
does it all (see die_with_launcher for why)."""

import collections
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import time


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

# A process started again after its predecessor of the same role and rank
# failed gets how many times that rank has been started again (1, 2, ...).
RESTART_VAR = "KVTRAIN_RESTART"


def _find_prctl():
    """libc's prctl, looked up once here: the child after fork only calls it."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not Linux: no parent-death signal
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    return prctl


_PRCTL = _find_prctl()


def die_with_launcher():
    """A preexec_fn that ties the child to this process: the kernel sends it
    SIGTERM when the thread that forked it ends, so when the launcher dies,
    even by SIGKILL. The kernel signals again each time a dying thread hands
    the child on to another thread of the process, so a launcher with several
    threads would send several SIGTERMs, and mpirun takes a second one as
    "abort now" and leaves its ranks running: launch.py has one thread, which
    forks every child and lives as long as the process. The signal survives
    exec, not a set-user-ID program. If the launcher died before prctl took
    hold, the child has been handed to another parent already: it exits
    instead of starting."""
    launcher = os.getpid()

    def preexec():
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != launcher:
            os._exit(128 + int(signal.SIGTERM))
    return preexec


def describe_exit(code, remote=False):
    """'exit code 3', 'signal SIGKILL', or for remote processes, whose
    signals arrive as 128+N, 'exit code 137 (SIGKILL)'."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return "signal " + signal.Signals(-code).name
        except ValueError:
            return "signal %d" % -code
    if remote and code > 128:
        try:
            return "exit code %d (%s)" % (code, signal.Signals(code - 128).name)
        except ValueError:
            pass
    return "exit code %d" % code


class Proc:
    """One process of the job. `stdin_data`, if given, is written to its stdin,
    which then stays open until teardown (remote wrappers watch it)."""

    def __init__(self, role, rank, argv, env, host="localhost", stdin_data=None,
                 remote=False):
        self.role = role
        self.rank = rank
        self.argv = argv
        self.env = env
        self.host = host
        self.stdin_data = stdin_data
        self.remote = remote
        self.popen = None
        self.last_lines = collections.deque(maxlen=20)
        # How many processes of this role and rank failed and were started
        # again before this one.
        self.restart = 0

    @property
    def name(self):
        return "%s %d" % (self.role, self.rank)

    def split_label(self, line):
        """The [label] and text of one output line."""
        return self.name, line

    @property
    def returncode(self):
        return self.popen.returncode if self.popen else None

    def again(self, extra_env):
        """A new, unstarted Proc that runs this one's command again: same
        role, rank, host and stdin, its environment plus `extra_env`."""
        return type(self)(self.role, self.rank, list(self.argv), {**self.env, **extra_env},
                          host=self.host, stdin_data=self.stdin_data, remote=self.remote)


class Supervisor:
    """Not thread-safe, and uses no threads: call everything from the main
    thread, which also reads the processes' output (pump())."""

    # After one process fails, how long the others get to end by themselves
    # (a failing kvtrain node tells the job, and the others exit with their
    # own report, flushing what they printed) before they are stopped.
    SETTLE_SECONDS = 1.0

    def __init__(self, out=None, grace_seconds=5.0, prefix_output=True):
        self.out = out or sys.stdout.buffer
        self.grace = grace_seconds
        self.prefix = prefix_output
        self.procs = []
        # How many processes of a role may fail without ending the job
        # ({"server": R} with server replicas); those that did.
        self.tolerate = {}
        self.lost = []
        # How many times a failed process of a role is started again, per
        # rank, before its failure ends the job ({"worker": K}).
        self.restarts = {}
        self._stop_reason = None
        # Every open stdout/stderr pipe; data: (Proc, its partial line).
        self._streams = selectors.DefaultSelector()

    def log(self, msg):
        self.out.write(("launch.py: " + msg + "\n").encode())
        self.out.flush()

    def start(self, proc):
        """Starts `proc` in its own session (teardown signals its group);
        call from the main thread: the child gets SIGTERM when the thread
        that started it ends (die_with_launcher)."""
        self._spawn(proc)
        self.procs.append(proc)
        return proc

    def _spawn(self, proc):
        proc.popen = subprocess.Popen(
            proc.argv, env=proc.env, start_new_session=True,
            preexec_fn=die_with_launcher(),
            stdin=subprocess.PIPE if proc.stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if proc.stdin_data is not None:
            proc.popen.stdin.write(proc.stdin_data.encode())
            proc.popen.stdin.flush()
        for stream in (proc.popen.stdout, proc.popen.stderr):
            os.set_blocking(stream.fileno(), False)
            self._streams.register(stream, selectors.EVENT_READ, (proc, bytearray()))

    def pump(self, timeout):
        """Waits up to `timeout` s for output and writes every complete line
        that came (a stream's last, unterminated one when it closes)."""
        if not self._streams.get_map():
            time.sleep(timeout)
            return
        for key, _ in self._streams.select(timeout):
            proc, partial = key.data
            try:
                chunk = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            partial += chunk
            lines = partial.split(b"\n")
            del partial[:]
            if chunk:
                partial += lines.pop()  # not yet terminated
            else:
                self._streams.unregister(key.fileobj)
                key.fileobj.close()
                if not lines[-1]:
                    lines.pop()
            for line in lines:
                label, text = proc.split_label(bytes(line) + b"\n")
                self.emit(proc, label, text)

    def emit(self, proc, label, line):
        """Writes one output line of `proc` under `label` ('worker 1')."""
        if not line.endswith(b"\n"):
            line += b"\n"
        proc.last_lines.append(line.decode(errors="replace").rstrip("\n"))
        if self.prefix:
            self.out.write(b"[" + label.encode() + b"] ")
        self.out.write(line)
        self.out.flush()

    def request_stop(self, reason):
        """Asks run() to tear the job down (safe from signal handlers)."""
        if self._stop_reason is None:
            self._stop_reason = reason

    def run(self, timeout=None):
        """Waits for the job. Returns the launcher's exit code: 0 when every
        process exited 0, otherwise non-zero after tearing everything down."""
        deadline = time.monotonic() + timeout if timeout else None
        while True:
            if self._stop_reason:
                self.log(self._stop_reason + "; stopping every process")
                self.teardown()
                return 130 if "SIGINT" in self._stop_reason else 143
            failed = next((p for p in self.procs
                           if p not in self.lost and p.popen.poll() not in (None, 0)), None)
            # Once the scheduler has exited the job is over: a worker that
            # died after it would find no job to rejoin.
            over = any(p.role == "scheduler" and p.popen.poll() is not None for p in self.procs)
            if failed and failed.restart < self.restarts.get(failed.role, 0) and not over:
                if self._restart(failed):
                    continue
                return self._fail(failed)
            if failed and self.tolerate.get(failed.role, 0) > 0:
                self.tolerate[failed.role] -= 1
                self.lost.append(failed)
                self.log("%s failed with %s; the job goes on without it"
                         % (failed.name, describe_exit(failed.returncode, failed.remote)))
                continue
            if failed:
                return self._fail(failed)
            if all(p.popen.poll() == 0 for p in self.procs if p not in self.lost):
                self._drain()
                return 0
            if deadline and time.monotonic() > deadline:
                self.log("the job exceeded --timeout %g s; stopping every process" % timeout)
                self.teardown()
                return 124
            self.pump(0.05)

    def _restart(self, failed):
        """Starts `failed` again in its place in self.procs (its output
        keeps its label); False when the new process cannot be started."""
        n = failed.restart + 1
        where = " on %s" % failed.host if failed.remote else ""
        self.log("%s%s failed with %s; starting it again (restart %d of %d)"
                 % (failed.name, where, describe_exit(failed.returncode, failed.remote),
                    n, self.restarts[failed.role]))
        # Whatever the dead process left in its group would outlive it (and
        # could hold its pipes); a remote wrapper's stdin is no longer watched.
        if failed.popen.stdin:
            try:
                failed.popen.stdin.close()
            except OSError:
                pass
        _signal_group(failed.popen, signal.SIGKILL)
        proc = failed.again({RESTART_VAR: str(n)})
        proc.restart = n
        try:
            self._spawn(proc)
        except OSError as e:
            self.log("cannot start %s again: %s" % (failed.name, e))
            return False
        self.procs[self.procs.index(failed)] = proc
        return True

    def _fail(self, failed):
        how = describe_exit(failed.returncode, failed.remote)
        if failed.restart:
            how += " (after %d restart%s)" % (failed.restart, "s" if failed.restart > 1 else "")
        end = time.monotonic() + self.SETTLE_SECONDS
        while time.monotonic() < end and any(p.popen.poll() is None for p in self.procs):
            self.pump(0.05)
        self.teardown(exclude=failed)
        self._drain()
        where = " on %s" % failed.host if failed.remote else ""
        self.log("%s%s failed with %s; stopped every other process" % (failed.name, where, how))
        if failed.last_lines:
            self.log("last lines of %s:" % failed.name)
            for line in failed.last_lines:
                self.log("  | " + line)
        code = failed.returncode
        return code if code and code > 0 else 1

    def teardown(self, exclude=None):
        """SIGTERM to every live process group (closing remote wrappers'
        stdin, which stops the remote side), SIGKILL after the grace period."""
        live = [p for p in self.procs if p is not exclude and p.popen.poll() is None]
        for p in live:
            if p.popen.stdin:
                try:
                    p.popen.stdin.close()
                except OSError:
                    pass
            _signal_group(p.popen, signal.SIGTERM)
        end = time.monotonic() + self.grace
        while time.monotonic() < end and any(p.popen.poll() is None for p in live):
            self.pump(0.05)
        for p in live:
            if p.popen.poll() is None:
                _signal_group(p.popen, signal.SIGKILL)
                p.popen.wait()
        # Children of an exited process may still hold its group alive.
        for p in self.procs:
            _signal_group(p.popen, signal.SIGKILL)

    def _drain(self, timeout=2.0):
        """Writes what exited processes left in their pipes; gives up after
        `timeout` s on a pipe that something they started still holds."""
        end = time.monotonic() + timeout
        while self._streams.get_map() and time.monotonic() < end:
            self.pump(0.05)


def _signal_group(popen, sig):
    try:
        os.killpg(popen.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
