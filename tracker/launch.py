#!/usr/bin/env python3
"""Starts a kvtrain job: a scheduler on this host, then servers and workers
locally, over ssh, through mpirun or through Slurm's srun. Stops the whole
job when any process fails (unless --max-restarts starts a dead worker again
or --server-replicas lets the job go on without a server) or on Ctrl-C, and
says which process failed and how; if launch.py itself is killed, every
process it started gets SIGTERM."""

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hostfile  # noqa: E402
import jobkey  # noqa: E402
import launchers  # noqa: E402
import netaddr  # noqa: E402
from supervisor import Proc, Supervisor  # noqa: E402

EXAMPLES = """examples:
  # 2 workers and 2 servers on this machine
  tracker/launch.py -n 2 -s 2 --launcher local \\
      bazel-bin/examples/train_mnist --kv-store dist_sync

  # over ssh: servers on the first hosts, then workers, round-robin
  tracker/launch.py -n 4 -s 2 --launcher ssh -H hosts \\
      --sync-dst-dir /tmp/kvtrain-job ./train_mnist --kv-store dist_sync

  # MXNet's form: with -H the launcher is ssh, -s defaults to -n
  tracker/launch.py -n 2 -H hosts --sync-dst-dir /tmp/kvtrain \\
      train_mnist --network lenet --kv-store dist_sync

  # each server's keys also on the next server: the job outlives a dead server
  tracker/launch.py -n 2 -s 3 --server-replicas 1 ./train_mnist --kv-store dist_sync

  # a worker that dies is started again (up to 3 times per rank) and rejoins
  tracker/launch.py -n 4 -s 2 --max-restarts 3 ./train_mnist --kv-store dist_sync

  # pick the NIC every node advertises, log the control plane
  DMLC_INTERFACE=eth1 PS_VERBOSE=1 tracker/launch.py -n 2 -s 2 ...

  # through Open MPI's mpirun (servers and workers as two rank groups)
  tracker/launch.py -n 2 -s 2 --launcher mpi -H hosts ./train_mnist ...

  # through Slurm's srun, e.g. inside `salloc -n 4` or an sbatch script
  tracker/launch.py -n 2 -s 2 --launcher slurm ./train_mnist --kv-store dist_sync

hostfile lines: `host`, `host:sshport`, `host slots=N`; # comments.
"""

# MXNet's launchers that kvtrain does not have, and what to use instead.
NOT_HERE = {
    "sge": "kvtrain has no Sun Grid Engine launcher; use --launcher ssh -H "
           "hosts (or --launcher mpi) with the hosts SGE allotted, or --launcher slurm",
    "yarn": "kvtrain has no YARN launcher; use --launcher ssh -H hosts, "
            "--launcher mpi or --launcher slurm",
}

# Options of MXNet's launch.py that belong to launchers kvtrain does not
# have: named as errors, never passed on to the command.
MXNET_ONLY_OPTIONS = {
    "-SH": "--server-hostfile is for MXNet's BytePS launcher; kvtrain places "
           "servers on the first hosts of -H (see docs/launching.md)",
    "--server-hostfile": "for MXNet's BytePS launcher; kvtrain places servers on "
                         "the first hosts of -H (see docs/launching.md)",
    "--byteps-launch": "kvtrain has no BytePS launcher; its own servers are the "
                       "parameter servers (-s)",
    "--scheduler-ip": "for MXNet's BytePS launcher; use --host-ip",
    "--scheduler-port": "for MXNet's BytePS launcher; kvtrain's scheduler takes a "
                        "free port (DMLC_PS_ROOT_PORT to fix it)",
    "--p3": "kvtrain has no P3 van; dist_sync already overlaps each layer's "
            "push with the backward pass",
}

# The scheduler binds any free port and writes its number here, so no other
# process can take the port between choosing and binding it.
PORT_FILE_VAR = "KVTRAIN_SCHEDULER_PORT_FILE"


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="launch.py", description=__doc__, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--num-workers", type=int, required=True,
                    help="number of worker processes")
    ap.add_argument("-s", "--num-servers", type=int,
                    help="number of server processes (default: the number of workers)")
    ap.add_argument("--launcher", choices=["local", "ssh", "mpi", "slurm"] + sorted(NOT_HERE),
                    help="how servers and workers are started (default: ssh with "
                    "-H, else local)")
    ap.add_argument("-H", "--hostfile", help="hosts for ssh and mpi")
    ap.add_argument("--sync-dst-dir", metavar="DIR",
                    help="ssh: rsync the working directory to DIR on every host, run there")
    ap.add_argument("--env", action="append", metavar="K=V", default=[],
                    help="set K=V (or K:V) for every process (repeatable)")
    ap.add_argument("--env-server", action="append", metavar="K=V", default=[],
                    help="set K=V (or K:V, MXNet's form) for servers only (repeatable)")
    ap.add_argument("--env-worker", action="append", metavar="K=V", default=[],
                    help="set K=V (or K:V, MXNet's form) for workers only (repeatable)")
    ap.add_argument("--host-ip", help="the scheduler's address (overrides the rule)")
    ap.add_argument("--timeout", type=float, metavar="SECONDS",
                    help="stop the whole job after this long (exit code 124)")
    ap.add_argument("--ssh-arg", action="append", default=[], metavar="ARG",
                    help="extra argument for ssh, e.g. --ssh-arg=-i --ssh-arg=key")
    ap.add_argument("--ssh-strict-host-keys", action="store_true",
                    help="ssh only to hosts whose key is in known_hosts already "
                    "(StrictHostKeyChecking=yes); the default, accept-new, trusts a "
                    "host seen for the first time; also %s=1"
                    % launchers.STRICT_HOST_KEYS_VAR)
    ap.add_argument("--mpirun-arg", action="append", default=[], metavar="ARG",
                    help="extra argument for mpirun")
    ap.add_argument("--slurm-arg", action="append", default=[], metavar="ARG",
                    help="extra argument for srun, e.g. --slurm-arg=--partition=gpu")
    ap.add_argument("--server-replicas", type=int, default=0, metavar="R",
                    help="keep each server's keys on R more servers, so that the job "
                    "goes on when up to R servers die (default 0: a dead server ends "
                    "the job); local and ssh launchers; docs/reliability.md")
    ap.add_argument("--max-restarts", type=int, default=0, metavar="K",
                    help="a worker that dies (non-zero exit or signal) is started again, "
                    "same rank, same host, same command and environment, up to K times "
                    "per rank; the restarted worker rejoins the running job (default 0: "
                    "a dead worker ends the job); with --server-replicas dead servers too, "
                    "which copy their key ranges and are copies again; local and ssh "
                    "launchers; "
                    "docs/launching.md")
    ap.add_argument("--insecure", action="store_true",
                    help="no CURVE security (plain ZeroMQ): anyone who can reach "
                    "the job's ports can join it; also KVTRAIN_INSECURE=1")
    ap.add_argument("command", nargs=argparse.REMAINDER,
                    help="the program and its arguments")
    args, unknown = ap.parse_known_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    for option in unknown:
        name = option.split("=", 1)[0]
        if name in MXNET_ONLY_OPTIONS:
            ap.error("%s: %s" % (name, MXNET_ONLY_OPTIONS[name]))
    if unknown:
        # MXNet's launch.py hands options it does not know to the command,
        # after the command's own arguments.
        print("launch.py: passing %s on to the command (not a launch.py option)"
              % " ".join(unknown), file=sys.stderr)
        args.command += unknown
    if args.num_servers is None:
        args.num_servers = args.num_workers
    if args.launcher in NOT_HERE:
        ap.error("--launcher %s: %s" % (args.launcher, NOT_HERE[args.launcher]))
    if args.launcher is None:
        # MXNet's launch.py defaults to ssh; without a hostfile there is
        # nowhere to ssh to.
        args.launcher = "ssh" if args.hostfile else "local"
    problems = []
    if not args.command:
        problems.append("no command given")
    if args.num_workers < 1:
        problems.append("-n must be at least 1, got %d" % args.num_workers)
    if args.num_servers < 0:
        problems.append("-s must be 0 or more, got %d" % args.num_servers)
    if args.launcher == "ssh" and not args.hostfile:
        problems.append("--launcher ssh needs -H/--hostfile")
    if args.server_replicas < 0 or (args.server_replicas > 0 and
                                    args.server_replicas >= args.num_servers):
        problems.append("--server-replicas must be 0 or less than -s (%d), got %d"
                        % (args.num_servers, args.server_replicas))
    if args.server_replicas > 0 and args.launcher not in ("local", "ssh"):
        problems.append("--server-replicas works with --launcher local and ssh (mpirun "
                        "and srun end every process of a role when one dies)")
    if args.max_restarts < 0:
        problems.append("--max-restarts must be 0 or more, got %d" % args.max_restarts)
    if args.max_restarts > 0 and args.launcher not in ("local", "ssh"):
        problems.append("--max-restarts works with --launcher local and ssh (mpirun "
                        "and srun end every rank of a job when one dies, so they cannot "
                        "start one again)")
    if args.sync_dst_dir and args.launcher != "ssh":
        problems.append("--sync-dst-dir works with --launcher ssh only")
    if args.ssh_strict_host_keys and args.launcher != "ssh":
        problems.append("--ssh-strict-host-keys works with --launcher ssh only")
    if problems:
        ap.error("; ".join(problems))
    return args


class Launcher:
    """One job from preflight to exit code."""

    def __init__(self, args):
        self.args = args
        self.sup = Supervisor()
        self.port_dir = tempfile.mkdtemp(prefix="kvtrain-launch-")

    def log(self, msg):
        self.sup.log(msg)

    def prepare(self):
        """Everything that can fail before a process starts."""
        a = self.args
        self.spec = launchers.JobSpec(
            a.command, a.num_workers, a.num_servers,
            env_all=launchers.parse_env_args(a.env, "--env"),
            env_server=launchers.parse_env_args(a.env_server, "--env-server"),
            env_worker=launchers.parse_env_args(a.env_worker, "--env-worker"))
        if a.server_replicas > 0:
            self.spec.env_all["KVTRAIN_SERVER_REPLICAS"] = str(a.server_replicas)
            # The job goes on without up to that many servers; whether their
            # keys still have a copy, the job's nodes decide (and end it if not).
            self.sup.tolerate["server"] = a.server_replicas
        if a.max_restarts > 0:
            # Every node learns that a worker may come back (the servers
            # wait for it instead of ending the job), and each restart is
            # launch.py's to make.
            self.spec.env_all["KVTRAIN_WORKER_RESTARTS"] = str(a.max_restarts)
            self.sup.restarts["worker"] = a.max_restarts
            if a.server_replicas > 0:
                # A server started again copies its key ranges from their
                # primaries and is a copy again.
                self.sup.restarts["server"] = a.max_restarts
        self.spec.check_names()
        self.strict_host_keys = (a.ssh_strict_host_keys or
                                 launchers.strict_host_keys_requested(self.spec.environ))
        self.hosts = hostfile.parse_hostfile(a.hostfile) if a.hostfile else []
        roles = [("server", r) for r in range(a.num_servers)] + \
                [("worker", r) for r in range(a.num_workers)]
        if a.launcher == "ssh":
            self.placement = hostfile.place(self.hosts, a.num_servers, a.num_workers)
        else:
            self.placement = [(role, rank, None) for role, rank in roles]
        interface = self.spec.forwarded().get("DMLC_INTERFACE")
        remote = [h.name for h in self.hosts] if a.launcher in ("ssh", "mpi") else []
        if a.launcher == "slurm" and not (a.host_ip or interface):
            remote = launchers.slurm_remote_hosts()
        self.spec.root_uri = netaddr.scheduler_address(a.host_ip, interface, remote)
        self.spec.command = a.command = launchers.resolve_command(a.command)
        # A process per server and worker here (local nodes, ssh clients),
        # else one mpirun or srun per role; and the scheduler.
        per_node = a.launcher in ("local", "ssh")
        launchers.raise_open_file_limit(1 + (a.num_servers + a.num_workers if per_node else 2))
        self.prepare_security()
        self.workdir = a.sync_dst_dir or os.getcwd()
        if a.launcher == "ssh":
            if a.sync_dst_dir:
                launchers.sync_dir(self.hosts, a.ssh_arg, a.sync_dst_dir, self.log,
                                   strict_host_keys=self.strict_host_keys)
            launchers.check_ssh_hosts(self.hosts, a.ssh_arg, self.workdir, a.command,
                                      strict_host_keys=self.strict_host_keys)

    def prepare_security(self):
        """The job's key: the user's (KVTRAIN_JOB_KEY or KVTRAIN_JOB_KEY_FILE
        in launch.py's environment) or a new one. Local processes read it
        from a 0600 file in a 0700 directory removed at exit; ssh sends it in
        the script on ssh's stdin, mpirun in its environment (-x NAME).
        Never on a command line."""
        a = self.args
        environ = self.spec.environ
        sec = {jobkey.JOB_ID_VAR: jobkey.new_job_id()}
        if a.insecure or jobkey.insecure_requested(environ):
            print("launch.py: warning: %s: CURVE security is off; anyone who can "
                  "reach the job's ports can join it, push, pull and stop it"
                  % ("--insecure" if a.insecure else jobkey.INSECURE_VAR + "=1"),
                  file=sys.stderr, flush=True)
            sec[jobkey.INSECURE_VAR] = "1"
        else:
            try:
                key = jobkey.key_from_environ(environ) or jobkey.new_secret_key()
            except jobkey.KeyError_ as e:
                raise launchers.LaunchError(str(e))
            if a.launcher == "local":
                sec[jobkey.KEY_FILE_VAR] = jobkey.write_key_file(self.port_dir, key)
            else:
                sec[jobkey.KEY_VAR] = key
        self.spec.security_env = sec

    def start_scheduler(self):
        port_file = os.path.join(self.port_dir, "port")
        env = {k: v for k, v in self.spec.environ.items()
               if k not in launchers.SECURITY_VARS}
        env.update(self.spec.role_env("scheduler", 0))
        env["DMLC_PS_ROOT_PORT"] = "0"
        env[PORT_FILE_VAR] = port_file
        sched = self.sup.start(Proc("scheduler", 0, list(self.args.command), env))
        limit = float(self.spec.forwarded().get("KVTRAIN_STARTUP_TIMEOUT", 60))
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if sched.popen.poll() is not None:
                return None
            try:
                with open(port_file) as f:
                    text = f.read().strip()
                if text.isdigit():
                    return int(text)
            except OSError:
                pass
            self.sup.pump(0.02)  # the scheduler's output, as it comes
        self.log("the scheduler did not report its port within %g s (is %s a "
                 "kvtrain program?)" % (limit, self.args.command[0]))
        return None

    def procs(self):
        a = self.args
        if a.launcher == "local":
            procs, shares = launchers.local_procs(self.spec,
                                                  [(r, k) for r, k, _ in self.placement])
            if shares:
                self.log("this host's %d cores: KVTRAIN_NUM_THREADS=%s (set "
                         "KVTRAIN_NUM_THREADS or OMP_NUM_THREADS to choose)"
                         % (launchers.host_cores(),
                            ", ".join("%d per %s" % (n, r) for r, n in sorted(shares.items(),
                                                                       reverse=True))))
            return procs
        if a.launcher == "ssh":
            return launchers.ssh_procs(self.spec, self.placement, a.ssh_arg, self.workdir,
                                       self.strict_host_keys)
        if a.launcher == "slurm":
            return launchers.slurm_procs(self.spec, a.slurm_arg)
        return launchers.mpi_procs(self.spec, self._mpi_hostfile(), a.mpirun_arg,
                                   self.port_dir)

    def _mpi_hostfile(self):
        if not self.hosts:
            return None
        path = os.path.join(self.port_dir, "mpi_hosts")
        with open(path, "w") as f:
            for h in self.hosts:
                f.write(h.name + (" slots=%d" % h.slots if h.slots else "") + "\n")
        return path

    def run(self):
        a = self.args
        for role, rank, host in self.placement:
            if host is not None:
                self.log("%s %d -> %s" % (role, rank, host.name))
        port = self.start_scheduler()
        if port is None:
            if self.sup.procs[0].popen.poll() is not None:
                return self.sup.run()  # reports the scheduler's failure
            self.sup.teardown()
            return 1
        self.spec.root_port = port
        self.log("scheduler at %s:%d; %d servers, %d workers (%s launcher)"
                 % (self.spec.root_uri, port, a.num_servers, a.num_workers, a.launcher))
        for p in self.procs():
            self.sup.start(p)
        return self.sup.run(timeout=a.timeout)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    launcher = Launcher(args)
    try:
        launcher.prepare()
    except (launchers.LaunchError, hostfile.HostfileError, netaddr.AddressError) as e:
        print("launch.py: error: %s" % e, file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, _f: launcher.sup.request_stop(
            "received " + signal.Signals(s).name))
    try:
        return launcher.run()
    finally:
        shutil.rmtree(launcher.port_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
