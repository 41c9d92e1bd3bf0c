"""Test beds for the launcher's ssh tests: a real sshd with throw-away keys
on a free port, and network namespaces joined by a bridge so that "remote"
hosts have their own addresses. Root is needed for namespaces."""

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time

SSHD = "/usr/sbin/sshd"


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(addr="127.0.0.1"):
    """A port that is free now, for a server a test starts a moment later.
    It is drawn below the kernel's ephemeral range: a port the kernel hands
    out (bind to 0, or the source port of any connect, as mpirun's daemons
    and ZeroMQ make) could be taken by another process in between."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(100):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind((addr, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def _run(argv, check=True):
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(argv), r.stderr.strip()))
    return r


class SshServer:
    """sshd listening on addr:port (inside network namespace `netns` if
    given) that accepts one generated client key."""

    def __init__(self, workdir, addr="127.0.0.1", port=None, netns=None):
        self.dir = workdir
        self.addr = addr
        self.port = port or free_port(addr)
        self.netns = netns
        self.proc = None

    @staticmethod
    def make_keys(workdir):
        """Host key, client key and authorized_keys in `workdir`."""
        for name in ("host_key", "client_key"):
            path = os.path.join(workdir, name)
            if not os.path.exists(path):
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path])
        shutil.copy(os.path.join(workdir, "client_key.pub"),
                    os.path.join(workdir, "authorized_keys"))

    def start(self):
        self.make_keys(self.dir)
        os.makedirs("/run/sshd", exist_ok=True)
        conf = os.path.join(self.dir, "sshd_config.%s.%d" % (self.addr, self.port))
        with open(conf, "w") as f:
            f.write("\n".join([
                "Port %d" % self.port, "ListenAddress %s" % self.addr,
                "HostKey %s" % os.path.join(self.dir, "host_key"),
                "AuthorizedKeysFile %s" % os.path.join(self.dir, "authorized_keys"),
                "PidFile none", "StrictModes no", "UsePAM no",
                "PermitRootLogin prohibit-password", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "LogLevel ERROR", ""]))
        argv = [SSHD, "-D", "-e", "-f", conf]
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns] + argv
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self._wait_listening()
        return self

    def _wait_listening(self, timeout=20):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("sshd exited: " + self.proc.stderr.read())
            probe = ["ssh"] + self.client_args() + ["-p", str(self.port), self.addr, "true"]
            if self.netns:
                probe = ["ip", "netns", "exec", self.netns] + probe
            if _run(["timeout", "10"] + probe, check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("sshd on %s:%d did not accept logins" % (self.addr, self.port))

    def client_args(self):
        """ssh options that log in to this server (for --ssh-arg)."""
        return ["-i", os.path.join(self.dir, "client_key"),
                "-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no",
                "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"]

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


class NetnsBed:
    """Namespaces kvtns1..N, each with interface `ifname` at 10.213.0.(i+1),
    joined by a bridge (the switch) to interface `ifname` at 10.213.0.1 in
    the root namespace, so the same DMLC_INTERFACE names the right device
    on every "host". Each namespace's interface also holds a second
    address, 10.213.0.(i+101) (`alias_addrs`): a name for the host that is
    not its interface's own (first) address.

    The bridge lives in a namespace of its own (`switch`), joined to each
    host by a veth pair whose switch end is `switch_ends[i]`: there its
    frames skip the iptables hooks that the root namespace's
    bridge-nf-call-* settings (br_netfilter) would run on every bridged
    packet, as a real switch runs no host's firewall, and the host's own
    settings stay untouched."""

    SUBNET = "10.213.0."
    BRIDGE = "kvtbr"
    # br_netfilter's settings, per namespace; absent where it is not loaded.
    NF_CALLS = ("bridge-nf-call-iptables", "bridge-nf-call-ip6tables",
                "bridge-nf-call-arptables")

    def __init__(self, count=2, ifname="kvt0"):
        self.count = count
        self.ifname = ifname
        self.tag = "%x" % (os.getpid() & 0xfff)
        self.namespaces = ["kvtns%s_%d" % (self.tag, i) for i in range(1, count + 1)]
        self.switch = "kvtsw%s" % self.tag
        self.switch_ends = ["kvth%s%d" % (self.tag, i) for i in range(1, count + 1)]
        self.addrs = [self.SUBNET + str(i + 1) for i in range(1, count + 1)]
        self.alias_addrs = [self.SUBNET + str(i + 101) for i in range(1, count + 1)]
        self.root_addr = self.SUBNET + "1"

    @staticmethod
    def available():
        """True when network namespaces can be created here."""
        name = "kvtprobe%d" % os.getpid()
        if shutil.which("ip") is None or os.geteuid() != 0:
            return False
        if _run(["ip", "netns", "add", name], check=False).returncode != 0:
            return False
        _run(["ip", "netns", "del", name], check=False)
        return True

    def _join(self, end, peer, peer_netns=None):
        """A veth pair from the switch's port `end` to `peer`, in namespace
        `peer_netns` or in this process's own."""
        if peer_netns:
            _run(["ip", "-n", self.switch, "link", "add", end, "type", "veth", "peer",
                  "name", peer, "netns", peer_netns])
        else:
            _run(["ip", "link", "add", peer, "type", "veth", "peer", "name", end,
                  "netns", self.switch])
        _run(["ip", "-n", self.switch, "link", "set", end, "master", self.BRIDGE, "up"])

    def setup(self):
        self.teardown()
        _run(["ip", "netns", "add", self.switch])
        for key in self.NF_CALLS:
            path = "/proc/sys/net/bridge/" + key
            _run(["ip", "netns", "exec", self.switch, "sh", "-c",
                  '[ ! -e "$1" ] || echo 0 > "$1"', "sh", path])
        _run(["ip", "-n", self.switch, "link", "add", self.BRIDGE, "type", "bridge"])
        _run(["ip", "-n", self.switch, "link", "set", self.BRIDGE, "up"])
        self._join("kvtr%s" % self.tag, self.ifname)
        _run(["ip", "addr", "add", self.root_addr + "/24", "dev", self.ifname])
        _run(["ip", "link", "set", self.ifname, "up"])
        for ns, end, addr, alias in zip(self.namespaces, self.switch_ends, self.addrs,
                                        self.alias_addrs):
            _run(["ip", "netns", "add", ns])
            self._join(end, self.ifname, ns)
            _run(["ip", "-n", ns, "addr", "add", addr + "/24", "dev", self.ifname])
            _run(["ip", "-n", ns, "addr", "add", alias + "/24", "dev", self.ifname])
            _run(["ip", "-n", ns, "link", "set", self.ifname, "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        return self

    def teardown(self):
        for ns in self.namespaces + [self.switch]:
            _run(["ip", "netns", "del", ns], check=False)
        _run(["ip", "link", "del", self.ifname], check=False)


class SlurmCluster:
    """A single-node Slurm (munged, slurmctld and slurmd from Debian's
    packages) on 127.0.0.1 with a throw-away configuration under `workdir`;
    `env()` is what srun and sinfo need to reach it (SLURM_CONF). The node
    claims 16 CPUs whatever the machine has, so a 2-worker, 2-server job
    fits on a small machine."""

    DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")

    def __init__(self, workdir):
        self.dir = workdir
        self.procs = []
        self.conf = os.path.join(workdir, "slurm.conf")
        self.socket = os.path.join(workdir, "munge.socket")

    @classmethod
    def available(cls):
        return (os.geteuid() == 0 and all(os.path.exists(d) for d in cls.DAEMONS)
                and shutil.which("srun") is not None)

    def env(self):
        return {"SLURM_CONF": self.conf}

    def start(self, timeout=60):
        d = self.dir
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        # munged refuses to run as root without --force; it checks the
        # directories of its files, so they all live in `d` (0700).
        os.chmod(d, 0o700)
        self._spawn(["/usr/sbin/munged", "--foreground", "--force", "--key-file", key,
                     "--socket", self.socket, "--pid-file", os.path.join(d, "munged.pid"),
                     "--log-file", os.path.join(d, "munged.log"),
                     "--seed-file", os.path.join(d, "munged.seed")])
        self._wait(lambda: os.path.exists(self.socket), timeout, "munged's socket")
        ctld_port, slurmd_port = free_port(), free_port()
        with open(self.conf, "w") as f:
            f.write("\n".join([
                "ClusterName=kvtrain-test",
                "SlurmctldHost=localhost(127.0.0.1)",
                "SlurmctldPort=%d" % ctld_port, "SlurmdPort=%d" % slurmd_port,
                "AuthType=auth/munge", "CredType=cred/munge",
                "AuthInfo=socket=%s" % self.socket,
                "SlurmUser=root", "SlurmdUser=root",
                "StateSaveLocation=%s" % os.path.join(d, "state"),
                "SlurmdSpoolDir=%s" % os.path.join(d, "spool"),
                "SlurmctldPidFile=%s" % os.path.join(d, "slurmctld.pid"),
                "SlurmdPidFile=%s" % os.path.join(d, "slurmd.pid"),
                "SlurmctldLogFile=%s" % os.path.join(d, "slurmctld.log"),
                "SlurmdLogFile=%s" % os.path.join(d, "slurmd.log"),
                "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
                "SlurmdParameters=config_overrides", "ReturnToService=2",
                "MpiDefault=none", "KillWait=5", "InactiveLimit=0",
                "NodeName=localhost NodeAddr=127.0.0.1 CPUs=16 State=UNKNOWN",
                "PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE "
                "State=UP OverSubscribe=YES", ""]))
        self._spawn(["/usr/sbin/slurmctld", "-D", "-i", "-f", self.conf])
        self._spawn(["/usr/sbin/slurmd", "-D", "-N", "localhost", "-f", self.conf])
        self._wait(self._node_idle, timeout, "an idle Slurm node")
        return self

    def _spawn(self, argv):
        env = dict(os.environ, SLURM_CONF=self.conf)
        self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True))

    def _node_idle(self):
        r = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                           env=dict(os.environ, SLURM_CONF=self.conf), timeout=20)
        return r.returncode == 0 and r.stdout.strip() in ("idle", "mix", "alloc")

    def _wait(self, ready, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError("%s exited (%s) waiting for %s; logs in %s"
                                       % (p.args[0], p.returncode, what, self.dir))
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError("no %s within %d s; logs in %s" % (what, timeout, self.dir))

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []


def temp_dir():
    return tempfile.mkdtemp(prefix="kvtrain-ssh-")
