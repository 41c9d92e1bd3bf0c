#!/usr/bin/env python3
"""An emulated cluster on one machine: N "hosts", each a network namespace
with its own sshd, joined through a bridge (in a namespace of its own,
where bridged frames skip the iptables hooks: tracker/testbed.py) by veth
pairs whose both directions are rate-limited with `tc ... tbf` (this kernel
has tbf and htb, not netem), and whose received packets keep their order
(keep_order: NAPI, as a NIC's driver). Traffic between namespaces is
traffic between hosts: no same-host socket, CURVE applies. The scheduler
runs in this namespace, on 10.213.0.1, its own link to the bridge. Root
only.

  bench/emulated_cluster.py --hosts 4 --rate 1gbit [--workers 2]
prints the launch.py arguments that use it and keeps it up until Enter
(dist_train_bench.py --link=1gbit brings one up around its runs).
Python stdlib only."""

import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tracker"))
import launchers  # noqa: E402  (tracker/launchers.py: the CPU threads' rule)
import testbed  # noqa: E402  (tracker/testbed.py: namespaces and sshd)

RATES = {"1gbit": 1e9, "10gbit": 10e9}


# Why available() says no: the words every skip message uses.
UNAVAILABLE = "network namespaces cannot be made here (needs root, iproute2, tc and ethtool)"


def available():
    return (testbed.NetnsBed.available() and shutil.which("tc") is not None and
            shutil.which("ethtool") is not None)


def _run(argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(argv), r.stderr.strip()))


def shape(dev, rate, netns=None):
    """Rate-limits what `dev` sends. The bucket holds 0.5 ms at the rate, at
    least 64 KB and at most 128 KB, so a step's messages cannot slip through
    as one burst: a bucket refilled while the workers compute would let them
    out faster than the link (at 10 Gbit/s 0.5 ms is 625 KB, more than the
    MLP's 437.5 KB a step, and plain TCP's step then beat the rate). The
    device's GSO packets are capped at half the bucket: tbf cuts a packet
    larger than its bucket into MTU-sized ones, each then passing the bridge,
    tbf's timer and the receiving stack on its own, which on 1 Gbit/s links
    took half of a 2-core machine's CPU (a real NIC segments in hardware)."""
    bits = RATES[rate]
    burst = max(64 * 1024, min(128 * 1024, int(bits / 8 * 0.0005)))
    pre = ["ip", "netns", "exec", netns] if netns else []
    _run(pre + ["ip", "link", "set", "dev", dev, "gso_max_size",
               str(min(65536, burst // 2))])
    _run(pre + ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
               rate, "burst", str(burst), "latency", "50ms"])


def keep_order(dev, netns=None):
    """Makes `dev` take up what it receives as a NIC's driver does: in
    NAPI, one CPU at a time polling the queue in order (veth does so once
    GRO is on, which real NICs have on by default). Without it, veth hands
    each packet to the backlog of whichever CPU released it from tbf, now
    the sender's and now the timer's on the other, and a flow's packets
    arrive out of order, which no real link does: TCP counts them lost and
    sends them again (here 32-116 spurious retransmits per 64-200 MiB).
    Steering each flow to one CPU with RPS also keeps the order, at an
    inter-processor interrupt per packet, which a VM pays as an exit."""
    pre = ["ip", "netns", "exec", netns] if netns else []
    _run(pre + ["ethtool", "-K", dev, "gro", "on"])


class Cluster:
    """`hosts` namespaces with links of `rate`; up() / down()."""

    def __init__(self, hosts=4, rate="1gbit", ifname="kvb0"):
        if rate not in RATES:
            raise ValueError("rate %r: expected one of %s" % (rate, ", ".join(RATES)))
        self.rate = rate
        self.bed = testbed.NetnsBed(hosts, ifname=ifname)
        self.workdir = testbed.temp_dir()
        self.sshd = []
        self.hostfile = os.path.join(self.workdir, "hosts")

    def up(self):
        self.bed.setup()
        try:
            sw = self.bed.switch
            for ns, addr, end in zip(self.bed.namespaces, self.bed.addrs, self.bed.switch_ends):
                shape(self.bed.ifname, self.rate, netns=ns)  # host -> switch
                shape(end, self.rate, netns=sw)              # switch -> host
                keep_order(self.bed.ifname, netns=ns)
                keep_order(end, netns=sw)
                self.sshd.append(testbed.SshServer(self.workdir, addr=addr, port=22,
                                                   netns=ns).start())
            with open(self.hostfile, "w") as f:
                f.write("".join(a + "\n" for a in self.bed.addrs))
        except Exception:
            self.down()
            raise
        return self

    def launch_args(self, workers=None, servers=None):
        """launch.py arguments that place one process per host. Given the
        job's `workers`, each process also gets the CPU threads that
        `--launcher local` gives it on this machine (launchers.thread_shares):
        every namespace sees all the machine's cores, so the ssh launcher
        would leave each process taking all of them, where the hosts in fact
        share them, and a worker's threads would wait on each other's."""
        args = ["--launcher", "ssh", "-H", self.hostfile, "--host-ip", self.bed.root_addr,
                "--env", "DMLC_INTERFACE=" + self.bed.ifname]
        if workers:
            shares = launchers.thread_shares(workers)
            args += ["--env-worker", "KVTRAIN_NUM_THREADS=%d" % shares["worker"],
                     "--env-server", "KVTRAIN_NUM_THREADS=%d" % shares["server"]]
        return args + ["--ssh-arg=%s" % a for a in self.sshd[0].client_args()]

    def popen(self, host, argv, **kwargs):
        """Runs `argv` on host `host` (0-based) of the cluster, as root."""
        return subprocess.Popen(["ip", "netns", "exec", self.bed.namespaces[host]] + argv,
                                **kwargs)

    def down(self):
        for s in self.sshd:
            s.stop()
        self.sshd = []
        for ns in self.bed.namespaces:  # anything a job left running there
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (OSError, ValueError):
                    pass
        self.bed.teardown()
        shutil.rmtree(self.workdir, ignore_errors=True)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--rate", default="1gbit", choices=sorted(RATES))
    ap.add_argument("--workers", type=int, default=None,
                    help="the workers of the jobs to run (sets their CPU threads; "
                    "default: half the hosts)")
    args = ap.parse_args(argv)
    if not available():
        print("emulated_cluster: skipped: " + UNAVAILABLE)
        return 0
    c = Cluster(args.hosts, args.rate).up()
    try:
        print("hosts: %s (links of %s); launch with:" % (" ".join(c.bed.addrs), args.rate))
        workers = args.workers or max(1, args.hosts // 2)
        print("  tracker/launch.py " + " ".join(c.launch_args(workers)) +
              " -n %d -s M PROGRAM ..." % workers)
        input("press Enter to take the cluster down ")
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        c.down()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
