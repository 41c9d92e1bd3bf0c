"""How each launcher starts a job's servers and workers: the environment every
process gets, and the local, ssh and mpi ways of starting them."""

import os
import re
import resource
import shlex
import shutil
import socket
import subprocess

import jobkey
from supervisor import Proc, die_with_launcher

# Variables of the launcher's environment that reach every process (remote
# ones too): these prefixes and names.
FORWARD_PREFIXES = ("DMLC_", "PS_", "KVTRAIN_", "MXNET_", "GLOG_")
FORWARD_NAMES = ("LD_LIBRARY_PATH", "OMP_NUM_THREADS")

# Set by the launcher for each process; --env may not override them.
JOB_VARS = ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
            "DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "DMLC_RANK")
# Security: set by the launcher (JobSpec.security_env), never by --env: a
# key given there would sit on launch.py's command line for all to read.
SECURITY_VARS = (jobkey.KEY_VAR, jobkey.KEY_FILE_VAR, jobkey.INSECURE_VAR,
                 jobkey.JOB_ID_VAR)


# ssh's host-key policy: StrictHostKeyChecking=yes (only hosts already in
# known_hosts) when set to 1, else accept-new (see ssh_options).
STRICT_HOST_KEYS_VAR = "KVTRAIN_SSH_STRICT_HOST_KEYS"

# A variable name the remote shell script can export: a shell name.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
ENV_NAME_RULE = "letters, digits and _, not starting with a digit"


class LaunchError(RuntimeError):
    """A problem found before anything started; the message says what."""


class JobSpec:
    """What to run: the command, the job's shape, the scheduler's address and
    the user's extra variables (--env, --env-server, --env-worker)."""

    def __init__(self, command, num_workers, num_servers, env_all=None,
                 env_server=None, env_worker=None, environ=None):
        self.command = command
        self.num_workers = num_workers
        self.num_servers = num_servers
        self.env_all = env_all or {}
        self.env_server = env_server or {}
        self.env_worker = env_worker or {}
        self.environ = dict(os.environ if environ is None else environ)
        self.root_uri = None
        self.root_port = None
        # The job key (or KVTRAIN_INSECURE) and job id, as each process
        # gets them (Launcher.prepare).
        self.security_env = {}

    def forwarded(self):
        """The launcher's variables that reach every process, with --env."""
        env = {k: v for k, v in self.environ.items()
               if k.startswith(FORWARD_PREFIXES) or k in FORWARD_NAMES}
        for k in JOB_VARS + SECURITY_VARS:
            env.pop(k, None)
        env.update(self.env_all)
        return env

    def check_names(self):
        """Raises LaunchError naming the first variable that would reach a
        process (the launcher's forwarded ones, --env*) whose name is not a
        shell name: the ssh launcher writes names unquoted into a script."""
        forwarded = {k for k in self.environ
                     if k.startswith(FORWARD_PREFIXES) or k in FORWARD_NAMES}
        for k in sorted(forwarded):
            if not ENV_NAME.match(k):
                raise LaunchError(
                    "launch.py's environment has a variable named %r, which it would "
                    "forward to every process, but that is not a variable name (%s); "
                    "unset it" % (k, ENV_NAME_RULE))
        for env in (self.env_all, self.env_server, self.env_worker):
            check_env_names(env)

    def role_env(self, role, rank):
        """The variables of one process (without the launcher's whole
        environment): forwarded ones, --env, role-specific ones, job ones."""
        env = self.forwarded()
        env.update(self.env_server if role == "server" else
                   self.env_worker if role == "worker" else {})
        env.update(self.security_env)
        env.update({
            "DMLC_ROLE": role,
            "DMLC_PS_ROOT_URI": self.root_uri,
            "DMLC_PS_ROOT_PORT": str(self.root_port),
            "DMLC_NUM_WORKER": str(self.num_workers),
            "DMLC_NUM_SERVER": str(self.num_servers),
            "DMLC_RANK": str(rank),
        })
        return env


def check_env_names(env):
    """Raises LaunchError naming a key of `env` that is not a shell name."""
    for k in sorted(env):
        if not ENV_NAME.match(k):
            raise LaunchError("%r is not a variable name (%s)" % (k, ENV_NAME_RULE))


def parse_env_args(pairs, flag):
    """['K=V', 'K:V' (MXNet's form), ...] -> dict; the first '=' or ':'
    ends the name. Names the flag and entry on error."""
    env = {}
    for pair in pairs or []:
        m = re.match(r"([^=:]*)[=:](.*)\Z", pair, re.S)
        if not m:
            raise LaunchError("%s %r: expected NAME=VALUE or NAME:VALUE" % (flag, pair))
        key, value = m.group(1), m.group(2)
        if not ENV_NAME.match(key):
            raise LaunchError("%s %r: %r is not a variable name (%s)"
                              % (flag, pair, key, ENV_NAME_RULE))
        if key in JOB_VARS:
            raise LaunchError("%s %s: %s is set by launch.py for each process"
                              % (flag, pair, key))
        if key in SECURITY_VARS:
            raise LaunchError(
                "%s %s=...: %s is set by launch.py (a value here would be on its "
                "command line); set %s or %s in launch.py's environment, or use "
                "--insecure" % (flag, key, key, jobkey.KEY_VAR, jobkey.KEY_FILE_VAR))
        env[key] = value
    return env


def resolve_command(command):
    """The command as every launcher runs it: a bare name that is not on
    PATH but is an executable in the working directory becomes ./name (as
    MXNet's `launch.py ... python train_mnist.py` finds its script there).
    Raises LaunchError when the program is found in neither."""
    prog = command[0]
    on_path = shutil.which(prog) if "/" not in prog else None
    if "/" not in prog and _is_executable(prog) and (
            on_path is None or os.path.samefile(on_path, prog)):
        # (PATH may hold "."; a remote host's PATH need not.)
        prog = "./" + prog
    found = _is_executable(prog) if "/" in prog else shutil.which(prog)
    if not found:
        raise LaunchError("command not found: %s" % prog)
    return [prog] + list(command[1:])


def _is_executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


# The variables that choose a process's CPU threads (base/env.cc).
THREAD_VARS = ("KVTRAIN_NUM_THREADS", "OMP_NUM_THREADS")


# Descriptors launch.py holds per process it starts (stdin, stdout and stderr
# pipes), and a margin for its own files, sockets and a Popen's pipes.
FILES_PER_PROCESS = 3
FILES_MARGIN = 64


def raise_open_file_limit(processes):
    """Raises launch.py's soft RLIMIT_NOFILE to what watching `processes`
    processes needs (the common default, 1024, holds about 500 local nodes;
    the processes inherit the raised limit, and kvtrain's nodes raise their
    own to the hard limit). A hard limit below the need is a LaunchError
    saying what to raise, before anything starts."""
    need = FILES_PER_PROCESS * processes + FILES_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise LaunchError(
            "%d processes need %d open files in launch.py, but its hard limit is %d: "
            "raise it (ulimit -Hn %d, or nofile in /etc/security/limits.conf)"
            % (processes, need, hard, need))
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def host_cores():
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def thread_shares(workers, cores=None):
    """The CPU threads each role gets when `workers` workers and their
    servers share `cores` cores (this host's by default): each worker
    cores // workers (at least 1), each server 1."""
    cores = host_cores() if cores is None else cores
    return {"worker": max(1, cores // max(1, workers)), "server": 1}


def local_procs(spec, placement):
    """Every server and worker as a child process of the launcher. They share
    this host's cores: unless the user chose a process's CPU threads
    (THREAD_VARS, in launch.py's environment or --env*), each worker gets
    KVTRAIN_NUM_THREADS = cores // workers (at least 1) and each server 1
    (its updates are a small part of a step, and it idles while workers
    compute). Otherwise every process would take every core and their
    threads would wait on each other (torchrun, likewise, sets
    OMP_NUM_THREADS=1 when it starts several processes on a host).
    Returns (procs, shares): shares maps a role to the thread count given to
    its processes, for the roles that got one."""
    procs = []
    per_role = thread_shares(sum(1 for role, _ in placement if role == "worker"))
    shares = {}
    for role, rank in placement:
        env = {k: v for k, v in spec.environ.items()
               if k not in SECURITY_VARS}
        env.update(spec.role_env(role, rank))
        if role in per_role and not any(env.get(v) for v in THREAD_VARS):
            env["KVTRAIN_NUM_THREADS"] = str(per_role[role])
            shares[role] = per_role[role]
        procs.append(Proc(role, rank, list(spec.command), env))
    return procs, shares


# --- ssh ---------------------------------------------------------------------

def strict_host_keys_requested(environ):
    """KVTRAIN_SSH_STRICT_HOST_KEYS: 1/true/yes/on, or 0/false/no/off/unset;
    anything else is a LaunchError naming the variable."""
    value = environ.get(STRICT_HOST_KEYS_VAR, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise LaunchError("%s=%r: expected 1 or 0" % (STRICT_HOST_KEYS_VAR,
                                                  environ[STRICT_HOST_KEYS_VAR]))


def ssh_options(ssh_args, strict_host_keys=False):
    """The options every ssh of the launcher gets (the probe, rsync's, the
    job's). ssh keeps the first value of each option, so the user's come
    before the launcher's defaults; only StrictHostKeyChecking=yes, asked for
    with --ssh-strict-host-keys, comes before them, so no --ssh-arg can
    weaken it. The default, accept-new, trusts a host seen for the first time
    (and records its key): that host gets the job's key."""
    argv = ["-T"]
    if strict_host_keys:
        argv += ["-o", "StrictHostKeyChecking=yes"]
    argv += list(ssh_args)
    return argv + ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new"]


def _check_host_name(host):
    # Hostfile parsing refuses these already; this guards every other caller.
    if host.name.startswith("-"):
        raise LaunchError("host %r begins with '-', which ssh and rsync would take "
                          "as an option" % host.name)


def ssh_base(host, ssh_args, strict_host_keys=False):
    """ssh's argv up to the host; `--` ends ssh's options, so neither the
    host nor the remote command can be read as one."""
    _check_host_name(host)
    argv = ["ssh"] + ssh_options(ssh_args, strict_host_keys)
    if host.port:
        argv += ["-p", str(host.port)]
    return argv + ["--", host.name]


def remote_script(env, workdir, command):
    """A bash script, sent on ssh's stdin (so no value, secrets included,
    appears on a command line), that runs `command` in its own session and
    stops it when the launcher goes away (its stdin closes). The body is one
    function so bash has read all of it before the watcher reads stdin."""
    # Names are written as they are (hence shell names only); every value,
    # the directory and every word of the command are quoted, in messages too.
    check_env_names(env)
    exports = "".join("  export %s=%s\n" % (k, shlex.quote(v)) for k, v in sorted(env.items()))
    q_dir = shlex.quote(workdir)
    prog = shlex.quote(command[0])
    cmd = " ".join(shlex.quote(c) for c in command)
    return (
        "kvtrain_job() {\n"
        + exports +
        "  cd %s 2>/dev/null || { printf 'launch.py: no directory %%s on %%s\\n' %s"
        " \"$(hostname)\" >&2; exit 127; }\n" % (q_dir, q_dir) +
        "  command -v %s >/dev/null 2>&1 || { printf 'launch.py: command not found on"
        " %%s: %%s\\n' \"$(hostname)\" %s >&2; exit 127; }\n" % (prog, prog) +
        "  setsid %s </dev/null &\n" % cmd +
        "  local child=$!\n"
        # Background commands read /dev/null unless stdin is redirected
        # explicitly: the watcher reads the launcher's pipe through fd 3.
        "  exec 3<&0\n"
        "  { while read -r _ <&3; do :; done; kill -TERM -- -$child 2>/dev/null;\n"
        "    sleep 3; kill -KILL -- -$child 2>/dev/null; } &\n"
        "  local watcher=$!\n"
        "  wait $child; local rc=$?\n"
        "  kill $watcher 2>/dev/null\n"
        "  exit $rc\n"
        "}\n"
        "kvtrain_job\n")


class SshProc(Proc):
    """A server or worker run through ssh: `argv` and `env` are ssh's, the
    process's own variables (`remote_env`) travel in the script on ssh's
    stdin, so a restart with more variables needs a new script."""

    def __init__(self, role, rank, argv, env, host, remote_env, workdir, command):
        super().__init__(role, rank, argv, env, host=host,
                         stdin_data=remote_script(remote_env, workdir, command), remote=True)
        self.remote_env = remote_env
        self.workdir = workdir
        self.command = command

    def again(self, extra_env):
        return SshProc(self.role, self.rank, list(self.argv), dict(self.env), self.host,
                       {**self.remote_env, **extra_env}, self.workdir, self.command)


def ssh_procs(spec, placement, ssh_args, workdir, strict_host_keys=False):
    procs = []
    for role, rank, host in placement:
        env = spec.role_env(role, rank)
        # A node advertises DMLC_NODE_HOST over DMLC_INTERFACE, so the
        # hostfile's name is only the fallback: a node given an interface
        # advertises that interface's address (unless --env set the host).
        explicit = {**spec.env_all,
                    **(spec.env_server if role == "server" else spec.env_worker)}
        if "DMLC_INTERFACE" not in env:
            env["DMLC_NODE_HOST"] = host.name
        elif "DMLC_NODE_HOST" not in explicit:
            env.pop("DMLC_NODE_HOST", None)
        argv = ssh_base(host, ssh_args, strict_host_keys) + ["bash", "-s"]
        procs.append(SshProc(role, rank, argv, dict(os.environ), host.name, env, workdir,
                             spec.command))
    return procs


def check_ssh_hosts(hosts, ssh_args, workdir, command, timeout=20, strict_host_keys=False):
    """Before anything starts: every host answers over ssh and has the
    working directory and the command. Raises LaunchError naming the host."""
    seen = set()
    for h in hosts:
        if (h.name, h.port) in seen:
            continue
        seen.add((h.name, h.port))
        probe = "cd %s && command -v %s" % (shlex.quote(workdir), shlex.quote(command[0]))
        argv = ssh_base(h, ssh_args[:] + ["-o", "ConnectTimeout=10"],
                        strict_host_keys) + [probe]
        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=timeout, text=True, preexec_fn=die_with_launcher())
        except subprocess.TimeoutExpired:
            raise LaunchError("cannot reach host %s over ssh: no answer in %d s"
                              % (h.name, timeout)) from None
        if r.returncode == 255:
            err = (r.stderr.strip().splitlines() or ["ssh failed"])[-1]
            if "Host key verification failed" in err:
                err += (" (--ssh-strict-host-keys: its key must be in known_hosts already)"
                        if strict_host_keys else
                        " (its key is not the one known_hosts holds for it)")
            raise LaunchError("cannot reach host %s over ssh: %s" % (h.name, err))
        if r.returncode != 0:
            raise LaunchError("on host %s: directory %s or command %s not found"
                              % (h.name, workdir, command[0]))


def sync_dir(hosts, ssh_args, dst, log, strict_host_keys=False):
    """rsync the launcher's working directory to `dst` on every host."""
    if not shutil.which("rsync"):
        raise LaunchError("--sync-dst-dir needs rsync (Debian package rsync)")
    seen = set()
    for h in hosts:
        if (h.name, h.port) in seen:
            continue
        seen.add((h.name, h.port))
        # rsync appends the host to this command, after ssh's `--`; `--`
        # also ends rsync's own options. An IPv6 address goes in brackets.
        rsh = " ".join(shlex.quote(a) for a in ssh_base(h, ssh_args, strict_host_keys)[:-1])
        target = "[%s]" % h.name if ":" in h.name else h.name
        log("rsync %s -> %s:%s" % (os.getcwd(), h.name, dst))
        r = subprocess.run(["rsync", "-az", "--mkpath", "-e", rsh, "--", "./",
                            "%s:%s/" % (target, dst)],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           preexec_fn=die_with_launcher())
        if r.returncode != 0:
            err = (r.stderr.strip().splitlines() or ["rsync failed"])[-1]
            raise LaunchError("rsync to %s:%s failed: %s" % (h.name, dst, err))


# --- mpi and slurm: one launcher command per role ----------------------------

class GroupProc(Proc):
    """One launcher command (mpirun, srun) that starts every process of a
    role; its output lines carry the launcher's rank tag, which becomes the
    usual [role rank] prefix."""

    TAG = None  # bytes regex whose group 1 is the rank
    TOOL = None

    def split_label(self, line):
        m = self.TAG.match(line)
        if not m:
            return "%s group" % self.role, line
        return "%s %d" % (self.role, int(m.group(1))), line[m.end():]

    @property
    def name(self):
        return "%s group (%s)" % (self.role, self.TOOL)


class MpiProc(GroupProc):
    TAG = re.compile(rb"^\[\d+,(\d+)\]<std(?:out|err)>:")
    TOOL = "mpirun"


class SlurmProc(GroupProc):
    TAG = re.compile(rb"^\s*(\d+): ")
    TOOL = "srun"


def _role_groups(spec):
    """(role, process count) of each role the job has."""
    return [(role, count) for role, count in
            (("server", spec.num_servers), ("worker", spec.num_workers)) if count > 0]


def _group_env(spec, role):
    """A role's environment for a launcher that starts all of its processes
    (the rank comes from the launcher's own variable)."""
    env = {k: v for k, v in spec.environ.items() if k not in SECURITY_VARS}
    role_env = spec.role_env(role, 0)
    role_env.pop("DMLC_RANK")
    env.update(role_env)
    return env, role_env


def _with_rank_from(var_chain, command):
    """sh -c wrapper: DMLC_RANK from the launcher's rank variable."""
    return ["sh", "-c", 'DMLC_RANK=%s; export DMLC_RANK; exec "$@"' % var_chain,
            "kvtrain-rank"] + list(command)


def mpi_procs(spec, hostfile_path, mpirun_args, tmp_dir):
    mpirun = shutil.which("mpirun")
    if not mpirun:
        raise LaunchError("--launcher mpi needs mpirun (Debian package openmpi-bin)")
    procs = []
    for role, count in _role_groups(spec):
        env, role_env = _group_env(spec, role)
        # Each mpirun gets its own session directory: two started at once in
        # the default one race to create it and one fails.
        session = os.path.join(tmp_dir, "ompi-" + role)
        os.makedirs(session, exist_ok=True)
        argv = [mpirun, "--allow-run-as-root", "--oversubscribe", "--tag-output",
                "--mca", "orte_tmpdir_base", session, "-n", str(count)] + list(mpirun_args)
        if hostfile_path:
            argv += ["--hostfile", hostfile_path]
        for k in sorted(role_env):
            argv += ["-x", k]  # the value travels in mpirun's environment
        # Each process's rank within its role is its MPI rank.
        argv += _with_rank_from("${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}", spec.command)
        procs.append(MpiProc(role, 0, argv, env))
    return procs


def slurm_procs(spec, srun_args):
    """One srun per role, one task per process: the rank within the role is
    the task's SLURM_PROCID; the environment (job key included) reaches the
    tasks through srun's own (--export=ALL), never its command line; a task
    that fails ends its step (--kill-on-bad-exit), and so the job."""
    srun = shutil.which("srun")
    if not srun:
        raise LaunchError("--launcher slurm needs srun (Debian package slurm-client)")
    procs = []
    for role, count in _role_groups(spec):
        env, _ = _group_env(spec, role)
        argv = [srun, "--label", "--kill-on-bad-exit=1", "--export=ALL",
                "--ntasks=%d" % count, "--job-name=kvtrain-%s" % role] + list(srun_args)
        argv += _with_rank_from("${SLURM_PROCID:-0}", spec.command)
        procs.append(SlurmProc(role, 0, argv, env))
    return procs


def slurm_remote_hosts():
    """The Slurm nodes a job's tasks may run on that are not this host: the
    allocation's (inside salloc/sbatch), else every node sinfo lists. Used
    only to pick the scheduler's address; [] when Slurm does not say."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    argv = (["scontrol", "show", "hostnames", nodelist] if nodelist
            else ["sinfo", "-h", "-N", "-o", "%N"])
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20,
                           preexec_fn=die_with_launcher())
    except (OSError, subprocess.TimeoutExpired):
        return []
    if r.returncode != 0:
        return []
    local = {socket.gethostname(), socket.getfqdn(), "localhost"}
    hosts = []
    for name in r.stdout.split():
        if name in local or name in hosts:
            continue
        try:
            if socket.gethostbyname(name).startswith("127."):
                continue
        except OSError:
            pass
        hosts.append(name)
    return hosts
