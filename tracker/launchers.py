"""How each launcher starts a job's servers and workers: the environment every
process gets, and the local, ssh and mpi ways of starting them."""

import os
import re
import shlex
import shutil
import socket
import subprocess

import jobkey
from supervisor import Proc

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


ENV_PAIR = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)[=:](.*)$", re.S)


def parse_env_args(pairs, flag):
    """['K=V', 'K:V' (MXNet's form), ...] -> dict; names the flag and entry
    on error."""
    env = {}
    for pair in pairs or []:
        m = ENV_PAIR.match(pair)
        if not m:
            raise LaunchError("%s %r: expected NAME=VALUE or NAME:VALUE" % (flag, pair))
        key, value = m.group(1), m.group(2)
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


def local_procs(spec, placement):
    """Every server and worker as a child process of the launcher."""
    procs = []
    for role, rank in placement:
        env = {k: v for k, v in spec.environ.items()
               if k not in SECURITY_VARS}
        env.update(spec.role_env(role, rank))
        procs.append(Proc(role, rank, list(spec.command), env))
    return procs


# --- ssh ---------------------------------------------------------------------

def ssh_base(host, ssh_args):
    # ssh keeps the first value of each option: the user's come first.
    argv = ["ssh", "-T"] + list(ssh_args)
    argv += ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new"]
    if host.port:
        argv += ["-p", str(host.port)]
    return argv + [host.name]


def remote_script(env, workdir, command):
    """A bash script, sent on ssh's stdin (so no value, secrets included,
    appears on a command line), that runs `command` in its own session and
    stops it when the launcher goes away (its stdin closes). The body is one
    function so bash has read all of it before the watcher reads stdin."""
    exports = "".join("  export %s=%s\n" % (k, shlex.quote(v)) for k, v in sorted(env.items()))
    prog = shlex.quote(command[0])
    cmd = " ".join(shlex.quote(c) for c in command)
    return (
        "kvtrain_job() {\n"
        + exports +
        "  cd %s 2>/dev/null || { echo \"launch.py: no directory %s on $(hostname)\" >&2; exit 127; }\n"
        % (shlex.quote(workdir), workdir) +
        "  command -v %s >/dev/null 2>&1 || { echo \"launch.py: command not found on $(hostname): %s\" >&2; exit 127; }\n"
        % (prog, command[0]) +
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


def ssh_procs(spec, placement, ssh_args, workdir):
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
        argv = ssh_base(host, ssh_args) + ["bash", "-s"]
        local_env = dict(os.environ)
        procs.append(Proc(role, rank, argv, local_env, host=host.name,
                          stdin_data=remote_script(env, workdir, spec.command),
                          remote=True))
    return procs


def check_ssh_hosts(hosts, ssh_args, workdir, command, timeout=20):
    """Before anything starts: every host answers over ssh and has the
    working directory and the command. Raises LaunchError naming the host."""
    seen = set()
    for h in hosts:
        if (h.name, h.port) in seen:
            continue
        seen.add((h.name, h.port))
        probe = "cd %s && command -v %s" % (shlex.quote(workdir), shlex.quote(command[0]))
        argv = ssh_base(h, ssh_args[:] + ["-o", "ConnectTimeout=10"]) + [probe]
        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=timeout, text=True)
        except subprocess.TimeoutExpired:
            raise LaunchError("cannot reach host %s over ssh: no answer in %d s"
                              % (h.name, timeout)) from None
        if r.returncode == 255:
            err = (r.stderr.strip().splitlines() or ["ssh failed"])[-1]
            raise LaunchError("cannot reach host %s over ssh: %s" % (h.name, err))
        if r.returncode != 0:
            raise LaunchError("on host %s: directory %s or command %s not found"
                              % (h.name, workdir, command[0]))


def sync_dir(hosts, ssh_args, dst, log):
    """rsync the launcher's working directory to `dst` on every host."""
    if not shutil.which("rsync"):
        raise LaunchError("--sync-dst-dir needs rsync (Debian package rsync)")
    seen = set()
    for h in hosts:
        if (h.name, h.port) in seen:
            continue
        seen.add((h.name, h.port))
        rsh = " ".join(shlex.quote(a) for a in ssh_base(h, ssh_args)[:-1])
        log("rsync %s -> %s:%s" % (os.getcwd(), h.name, dst))
        r = subprocess.run(["rsync", "-az", "--mkpath", "-e", rsh, "./",
                            "%s:%s/" % (h.name, dst)],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
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
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
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
