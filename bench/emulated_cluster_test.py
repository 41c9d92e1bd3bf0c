"""The emulated cluster (bench/emulated_cluster.py) on this machine: every
host's link is shaped both ways, a bulk TCP transfer between two of its
hosts arrives in order (no reordering, no retransmits: each veth takes up
what it receives in NAPI, without steering interrupts), a job's processes
get the CPU threads the local launcher would give them on this machine,
and down() leaves no namespace behind. Root only; skipped where namespaces cannot be made."""

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import emulated_cluster  # noqa: E402
import launchers  # noqa: E402  (tracker/, on the path through emulated_cluster)
from launch_testlib import FAKE_JOB, LAUNCH  # noqa: E402
from tools import pyunit  # noqa: E402

# Sends MIB mebibytes to ADDR:PORT, or receives them on PORT.
BULK = r"""
import socket, sys
mode, addr, port, mib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "recv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(); print("ready", flush=True)
    c, _ = s.accept(); n = 0; buf = bytearray(1 << 20)
    while True:
        k = c.recv_into(buf)
        if not k: break
        n += k
    print(n)
else:
    c = socket.create_connection((addr, port)); block = bytes(1 << 20)
    for _ in range(mib): c.sendall(block)
    c.close()
"""


def snmp(netns):
    """Tcp counters and TcpExt counters of a namespace, by name."""
    out = {}
    for path in ("/proc/net/snmp", "/proc/net/netstat"):
        text = subprocess.run(["ip", "netns", "exec", netns, "cat", path], check=True,
                              capture_output=True, text=True).stdout.splitlines()
        for names, values in zip(text[::2], text[1::2]):
            prefix = names.split(":")[0]
            for k, v in zip(names.split()[1:], values.split()[1:]):
                out[prefix + k] = int(v)
    return out


def tx_packets(netns, dev):
    """Packets `dev` has sent (a GSO packet counts once)."""
    return int(subprocess.run(["ip", "netns", "exec", netns, "cat",
                               "/sys/class/net/%s/statistics/tx_packets" % dev],
                              check=True, capture_output=True, text=True).stdout)


def nf_calls(netns=None):
    """br_netfilter's bridge-nf-call-iptables in `netns` (or this
    namespace), None where the module is not loaded."""
    path = "/proc/sys/net/bridge/bridge-nf-call-iptables"
    if not os.path.exists(path):
        return None
    pre = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run(pre + ["cat", path], check=True, capture_output=True,
                          text=True).stdout.strip()


@unittest.skipUnless(emulated_cluster.available(), emulated_cluster.UNAVAILABLE)
class EmulatedClusterTest(unittest.TestCase):
    def test_links_are_shaped_and_deliver_in_order(self):
        nf_root = nf_calls()
        c = emulated_cluster.Cluster(hosts=2, rate="1gbit").up()
        try:
            # Bridged frames skip br_netfilter's iptables hooks in the
            # switch's namespace (where the module is loaded), and this
            # namespace's own settings stay as they were.
            if nf_root is not None:
                self.assertEqual(nf_calls(c.bed.switch), "0")
                self.assertEqual(nf_calls(), nf_root)
            (ns1, ns2), (addr1, _) = c.bed.namespaces, c.bed.addrs
            for ns in (ns1, ns2):
                qdisc = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev",
                                        c.bed.ifname], capture_output=True, text=True).stdout
                self.assertIn("tbf", qdisc)
                self.assertIn("rate 1Gbit", qdisc)
            # Each receiving side polls its queue in NAPI (GRO on), both the
            # hosts' interfaces and the switch's ends, with no packet
            # steered to another CPU (RPS) by an interrupt.
            ends = [(ns, c.bed.ifname) for ns in (ns1, ns2)]
            ends += [(c.bed.switch, end) for end in c.bed.switch_ends]
            for ns, dev in ends:
                features = subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-k", dev],
                                          check=True, capture_output=True, text=True).stdout
                self.assertIn("generic-receive-offload: on", features, dev)
                rps = subprocess.run(["ip", "netns", "exec", ns, "cat", "/sys/class/net/%s/queues/"
                                      "rx-0/rps_cpus" % dev],
                                     check=True, capture_output=True, text=True).stdout
                self.assertEqual(int(rps.strip().replace(",", ""), 16), 0, dev + ": " + rps)
            before = snmp(ns2)
            tx_before = tx_packets(ns2, c.bed.ifname)
            recv = subprocess.Popen(["ip", "netns", "exec", ns1, sys.executable, "-c", BULK,
                                     "recv", addr1, "7391", "64"],
                                    stdout=subprocess.PIPE, text=True)
            self.assertEqual(recv.stdout.readline().strip(), "ready")
            subprocess.run(["ip", "netns", "exec", ns2, sys.executable, "-c", BULK, "send",
                            addr1, "7391", "64"], check=True, timeout=60)
            got = recv.stdout.read().strip()
            recv.wait(timeout=30)
            self.assertEqual(got, str(64 << 20))
            after = snmp(ns2)
            sent = after["TcpOutSegs"] - before["TcpOutSegs"]
            self.assertGreater(sent, 40000)  # 64 MiB of 1448-byte segments
            # Reordered packets would show as reordering seen and resent.
            self.assertEqual(after["TcpRetransSegs"] - before["TcpRetransSegs"], 0)
            self.assertEqual(after["TcpExtTCPSACKReorder"] - before["TcpExtTCPSACKReorder"], 0)
            # The data crossed the link as large GSO packets, not cut into
            # 1448-byte ones by tbf (which costs a core at 1 Gbit/s here).
            packets = tx_packets(ns2, c.bed.ifname) - tx_before
            self.assertLess(packets, sent // 4)
        finally:
            c.down()
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for ns in c.bed.namespaces + [c.bed.switch]:
            self.assertNotIn(ns, names)

    def test_processes_share_the_machines_cores(self):
        # Every namespace sees all the cores; the job's processes get what
        # `--launcher local` gives them on this machine, not all of them each.
        c = emulated_cluster.Cluster(hosts=3, rate="1gbit").up()
        try:
            r = subprocess.run([sys.executable, LAUNCH, "-n", "2", "-s", "1"] +
                               c.launch_args(2) +
                               [sys.executable, FAKE_JOB, "--print-env", "KVTRAIN_NUM_THREADS"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=120)
        finally:
            c.down()
        self.assertEqual(r.returncode, 0, r.stdout)
        share = launchers.thread_shares(2)["worker"]
        self.assertEqual(share, max(1, launchers.host_cores() // 2))
        for rank in (0, 1):
            self.assertIn("[worker %d] KVTRAIN_NUM_THREADS=%d" % (rank, share), r.stdout)
        self.assertIn("[server 0] KVTRAIN_NUM_THREADS=1", r.stdout)


if __name__ == "__main__":
    pyunit.main()
