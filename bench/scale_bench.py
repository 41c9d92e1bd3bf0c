#!/usr/bin/env python3
"""scale_bench: how a kvtrain job scales in node count on one host.

Starts jobs of bench/scale_node (3 workers per server, plus the scheduler)
under tracker/launch.py --launcher local, with the job key launch.py makes,
as a user gets it. For each size it reports the time from launch to the
first step, a barrier over every node and one over the workers (back to
back, the mean), one push-pull round (each worker one key on every server;
the median over workers of each worker's median round, and the slowest
worker's slowest), the scheduler's CPU over an idle spell (heartbeats
only) as a share of one core (and the whole idle job's, in cores), each idle node's resident memory, the time
from launch to the end of a clean job's finalize, and, in a second job of
the same size, the time from SIGKILLing one node mid-job to the first line
naming it dead and to launch.py's exit. The smallest size is the baseline:
every figure is also shown as its ratio to that size's. The issue's targets
follow, met or missed and by how much.

With --train, also train_mnist with 128 workers + 32 servers (dist_sync)
and with 128 workers (dist_allreduce) to the end, against the same job with
4 workers (+1 server) as the baseline.

Python stdlib only. Example:
  bench/scale_bench.py --node bazel-bin/bench/scale_node --sizes 16,64,256,1024
"""

import argparse
import os
import re
import resource
import selectors
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

LINE = re.compile(r"^\[(\w+) (\d+)\] scale_node: (\w+) (\d+) (.*)$")
FIELD = re.compile(r"(\w+)=([-0-9.]+)")


def log(msg):
    print("scale_bench: " + msg, flush=True)


def host_memory_kb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def raise_limits(processes, threads_per_process):
    """Raises this process's soft limits (inherited by launch.py and the
    nodes) to what `processes` nodes need, or says in one line what to
    raise. Returns False when the job cannot fit."""
    ok = True
    # launch.py holds two pipes per process; each node raises its own
    # descriptor limit to the hard limit (net::RaiseFileLimit).
    need_fds = 2 * processes + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need_fds:
        if hard == resource.RLIM_INFINITY or hard >= need_fds:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need_fds, hard))
        else:
            log("%d nodes need %d open files in launch.py, the hard limit is %d: "
                "raise it (ulimit -Hn, limits.conf nofile)" % (processes, need_fds, hard))
            ok = False
    need_tasks = processes * threads_per_process + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and soft < need_tasks:
        if hard == resource.RLIM_INFINITY or hard >= need_tasks:
            resource.setrlimit(resource.RLIMIT_NPROC, (need_tasks, hard))
        else:
            log("%d nodes need about %d threads of this user, the hard limit is %d: "
                "raise it (ulimit -Hu, limits.conf nproc)" % (processes, need_tasks, hard))
            ok = False
    with open("/proc/sys/kernel/threads-max") as f:
        if int(f.read()) < need_tasks:
            log("%d nodes need about %d threads: raise kernel.threads-max" %
                (processes, need_tasks))
            ok = False
    return ok


class Job:
    """One launch.py job; its output lines, timestamped as they arrive."""

    def __init__(self, argv, echo=False):
        self.echo = echo
        self.lines = []  # (monotonic s, text)
        self.t_launch = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=ROOT)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.partial = b""
        self.t_exit = None

    def pump(self, timeout):
        """Reads what came within `timeout` s; returns the new lines."""
        new = []
        if self.proc.stdout.closed:
            time.sleep(timeout)
            return new
        for _ in self.sel.select(timeout):
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            now = time.monotonic()
            if not chunk:
                self.sel.unregister(self.proc.stdout)
                self.proc.stdout.close()
                chunk = b"\n" if self.partial else b""
            parts = (self.partial + chunk).split(b"\n")
            self.partial = parts.pop()
            for p in parts:
                text = p.decode(errors="replace")
                self.lines.append((now, text))
                new.append((now, text))
                if self.echo:
                    print(text, flush=True)
        return new

    def wait_for(self, pattern, deadline):
        """The first line matching `pattern` (its time and match), reading on
        until it comes, the job ends or `deadline` passes: else None."""
        rx = re.compile(pattern)
        for t, text in self.lines:
            m = rx.search(text)
            if m:
                return t, m
        while time.monotonic() < deadline:
            for t, text in self.pump(0.05):
                m = rx.search(text)
                if m:
                    return t, m
            if self.proc.stdout.closed and self.proc.poll() is not None:
                return None
        return None

    def finish(self, deadline):
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.pump(0.05)
        if self.proc.poll() is None:
            self.kill()
        self.t_exit = time.monotonic()
        while not self.proc.stdout.closed:
            self.pump(0.05)
        return self.proc.returncode

    def kill(self):
        """Ends launch.py and every node (its own process group each)."""
        pids = [int(m.group(1)) for _, t in self.lines for m in [re.search(r" pid=(\d+)", t)] if m]
        for pid in [self.proc.pid] + pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait()

    def reports(self):
        """{(role, rank): {field: value}} from the nodes' scale_node lines."""
        out = {}
        for _, text in self.lines:
            m = LINE.match(text)
            if m:
                fields = out.setdefault((m.group(3), int(m.group(4))), {})
                fields.update({k: float(v) for k, v in FIELD.findall(m.group(5))})
        return out

    def tail(self, n=15):
        return "\n".join("  | " + t for _, t in self.lines[-n:])


def launch_argv(args, workers, servers, node_args):
    return ([sys.executable, args.launch, "-n", str(workers), "-s", str(servers),
             "--launcher", "local"] + args.launch_arg + [args.node] + node_args)


def run_size(args, nodes):
    """The clean job and the kill job of `nodes` nodes; a dict of figures."""
    servers = max(1, nodes // 4)
    workers = nodes - servers
    fig = {"nodes": nodes, "servers": servers, "workers": workers}
    node_args = ["--rounds=%d" % args.rounds, "--barriers=%d" % args.barriers,
                 "--idle_seconds=%g" % args.idle, "--value_bytes=%d" % args.value_bytes]
    job = Job(launch_argv(args, workers, servers, node_args), echo=args.verbose)
    rc = job.finish(time.monotonic() + args.timeout)
    rep = job.reports()
    if rc != 0:
        log("%d nodes: the job failed (launch.py exit %s); its last lines:\n%s" %
            (nodes, rc, job.tail()))
        fig["failed"] = "exit %s" % rc
        return fig
    w0 = rep.get(("worker", 0), {})
    sched = rep.get(("scheduler", 0), {})
    fig["start_s"] = w0["first_step_ns"] / 1e9 - job.t_launch
    fig["barrier_ms"] = w0["barrier_all_ms"]
    fig["wbarrier_ms"] = w0["barrier_workers_ms"]
    rounds = [f["round_ms"] for (r, _), f in rep.items() if r == "worker"]
    fig["round_ms"] = statistics.median(rounds)
    fig["round_max_ms"] = max(f["round_max_ms"] for (r, _), f in rep.items() if r == "worker")
    fig["sched_cpu_pct"] = 100.0 * sched["idle_cpu_ms"] / sched["idle_wall_ms"]
    for role in ("server", "worker"):
        rss = [f["rss_kb"] for (r, _), f in rep.items() if r == role]
        fig[role + "_rss_mb"] = statistics.median(rss) / 1024
    fig["sched_rss_mb"] = sched["rss_kb"] / 1024
    fig["job_idle_cores"] = sum(f["idle_cpu_ms"] / f["idle_wall_ms"] for f in rep.values())
    fig["threads"] = max(f.get("threads", 0) for f in rep.values())
    fig["job_pss_mb"] = sum(f.get("pss_kb", 0) for f in rep.values()) / 1024
    fig["end_s"] = job.t_exit - w0["finalize_ns"] / 1e9
    if len(rep) != nodes + 1:
        log("%d nodes: only %d of %d nodes reported" % (nodes, len(rep), nodes + 1))
    if not args.no_kill:
        kill_job(args, nodes, workers, servers, fig)
    return fig


def kill_job(args, nodes, workers, servers, fig):
    """SIGKILLs one node of a job in the middle of its traffic."""
    role = args.kill_role
    rank = (workers if role == "worker" else servers) // 2
    job = Job(launch_argv(args, workers, servers, ["--scenario=traffic"]), echo=args.verbose)
    deadline = time.monotonic() + args.timeout
    try:
        if job.wait_for(r"scale_node: worker 0 traffic running", deadline) is None:
            log("%d nodes: the kill job did not start; its last lines:\n%s" % (nodes, job.tail()))
            fig["kill_failed"] = True
            return
        found = job.wait_for(r"scale_node: %s %d pid=(\d+)" % (role, rank), deadline)
        job.pump(1.0)  # a second of traffic
        t_kill = time.monotonic()
        os.kill(int(found[1].group(1)), signal.SIGKILL)
        # A node's line ("worker 3 (...) is dead: ..."), or launch.py's own,
        # which sees its child die first and ends the job naming it.
        named = job.wait_for(r"\] .*%s %d \([^)]*\) is dead|launch\.py: %s %d failed"
                             % (role, rank, role, rank), t_kill + 60)
        job.finish(t_kill + 60)
    finally:
        if job.proc.poll() is None:
            job.kill()
    fig["killed"] = "%s %d" % (role, rank)
    fig["named_s"] = named[0] - t_kill if named else None
    fig["kill_exit_s"] = job.t_exit - t_kill
    if named is None:
        log("%d nodes: no line named the killed %s %d; last lines:\n%s" %
            (nodes, role, rank, job.tail()))


# (key, heading, format)
COLUMNS = [
    ("start_s", "start s", "%.2f"),
    ("barrier_ms", "barrier ms", "%.2f"),
    ("wbarrier_ms", "w. barrier ms", "%.2f"),
    ("round_ms", "push-pull ms", "%.2f"),
    ("sched_cpu_pct", "sched. CPU %", "%.2f"),
    ("server_rss_mb", "server RSS MB", "%.1f"),
    ("worker_rss_mb", "worker RSS MB", "%.1f"),
    ("named_s", "dead named s", "%.2f"),
]


def print_table(figs):
    base = figs[0]
    print("\nEach figure with its ratio to the %d-node job's (the baseline):" % base["nodes"])
    print("%-16s" % "nodes (s+w)" + "".join(" | %-17s" % h for _, h, _ in COLUMNS))
    for f in figs:
        row = "%-16s" % ("%d (%d+%d)" % (f["nodes"], f["servers"], f["workers"]))
        for key, _, fmt in COLUMNS:
            v, b = f.get(key), base.get(key)
            if v is None:
                cell = f.get("failed", "-")
            elif b:
                cell = (fmt % v) + " (%.2fx)" % (v / b)
            else:
                cell = fmt % v
            row += " | %-17s" % cell
        print(row)
    print("\nAlso measured:")
    for f in figs:
        if "failed" in f:
            print("  %d nodes: failed (%s)" % (f["nodes"], f["failed"]))
            continue
        print("  %d nodes: slowest worker's round %.2f ms; scheduler RSS %.1f MB; "
              "the job's PSS %.0f MB; %d threads in the largest node; the idle job's CPU "
              "%.2f cores; finalize to launch.py's exit %.2f s; kill of %s to launch.py's "
              "exit %s s" %
              (f["nodes"], f["round_max_ms"], f["sched_rss_mb"], f["job_pss_mb"],
               f["threads"], f["job_idle_cores"], f["end_s"], f.get("killed", "-"),
               "%.2f" % f["kill_exit_s"] if "kill_exit_s" in f else "-"))


def verdict(value, limit, unit, lower_is_better=True):
    if value is None:
        return "not measured"
    margin = limit - value if lower_is_better else value - limit
    word = "met" if margin >= 0 else "missed"
    return "%s%s: %s by %s%s (%.0f%%)" % (
        ("%.3g" % value), unit, word, "%.3g" % abs(margin), unit, 100.0 * abs(margin) / limit)


def print_targets(figs):
    by = {f["nodes"]: f for f in figs}
    big = by.get(1024, {})
    print("\nTargets:")
    print("  1,024 nodes start in under 60 s: " + verdict(big.get("start_s"), 60.0, " s"))
    if 64 in by and 1024 in by and "start_s" in by[64] and "start_s" in big:
        growth = big["start_s"] / by[64]["start_s"]
        print("  start-up grows no faster than linearly from 64 to 1,024 nodes: "
              "x%.2f for x16 the nodes: %s" % (growth, verdict(growth, 16.0, "x")))
    else:
        print("  start-up grows no faster than linearly from 64 to 1,024 nodes: not measured")
    print("  a barrier at 1,024 nodes under 50 ms: " + verdict(big.get("barrier_ms"), 50.0, " ms"))
    print("  the scheduler's heartbeat work under 5% of a core at 1,024 nodes: " +
          verdict(big.get("sched_cpu_pct"), 5.0, "%"))
    named = [f.get("named_s") for f in figs if "named_s" in f]
    worst = None if not named or None in named else max(named)
    print("  a dead node named within 5 s at every size: worst " + verdict(worst, 5.0, " s"))


def train_job(args, kind, workers, servers):
    argv = [sys.executable, args.launch, "-n", str(workers), "-s", str(servers),
            "--launcher", "local"] + args.launch_arg + [
        args.train, "--kv-store", kind, "--num-epochs", "1",
        "--num-examples", str(args.train_examples), "--disp-batches", "0"]
    job = Job(argv, echo=args.verbose)
    rc = job.finish(time.monotonic() + args.timeout)
    acc = [float(m.group(1)) for _, t in job.lines
           for m in [re.search(r"Test accuracy=([0-9.]+)", t)] if m]
    if rc != 0:
        log("%s %dw%ds failed (exit %s):\n%s" % (kind, workers, servers, rc, job.tail()))
    return {"rc": rc, "s": job.t_exit - job.t_launch, "acc": acc[-1] if acc else None}


def run_train(args):
    print("\ntrain_mnist, 1 epoch of %d examples, against 4 workers as the baseline:" %
          args.train_examples)
    n = args.train_workers
    for kind, servers, small_servers in (("dist_sync", n // 4, 1), ("dist_allreduce", 0, 0)):
        base = train_job(args, kind, 4, small_servers)
        big = train_job(args, kind, n, servers)
        for name, r in (("4w%ds" % small_servers, base), ("%dw%ds" % (n, servers), big)):
            print("  %-15s %-8s %s, %.1f s launch to exit (%.2fx), accuracy %s" % (
                kind, name, "ended cleanly" if r["rc"] == 0 else "FAILED (exit %s)" % r["rc"],
                r["s"], r["s"] / base["s"], r["acc"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="16,64,256,1024",
                    help="node counts, the first the baseline (3 workers per server)")
    ap.add_argument("--node", default=os.path.join(ROOT, "bazel-bin/bench/scale_node"))
    ap.add_argument("--launch", default=os.path.join(ROOT, "tracker/launch.py"))
    ap.add_argument("--launch-arg", action="append", default=[],
                    help="extra launch.py argument, e.g. --launch-arg=--insecure")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--barriers", type=int, default=20)
    ap.add_argument("--idle", type=float, default=10.0, help="idle spell, seconds")
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--no-kill", action="store_true", help="skip the kill jobs")
    ap.add_argument("--kill-role", choices=["worker", "server"], default="worker")
    ap.add_argument("--timeout", type=float, default=600.0, help="per job, seconds")
    ap.add_argument("--train", help="train_mnist binary: also the 128-worker jobs")
    ap.add_argument("--train-examples", type=int, default=12800)
    ap.add_argument("--train-workers", type=int, default=128,
                    help="--train: workers of the large jobs (dist_sync: a server per 4)")
    ap.add_argument("--verbose", action="store_true", help="echo every job's output")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    log("%s; 3 workers per server plus the scheduler; security %s; this host: %d cores, "
        "%.1f GiB available" % (
            ", ".join(map(str, sizes)) + " nodes",
            "off (--insecure)" if "--insecure" in args.launch_arg else "on (launch.py's job key)",
            os.cpu_count(), host_memory_kb() / 2**20))
    figs = []
    for nodes in sizes:
        per_node_kb = figs[0]["job_pss_mb"] * 1024 / (figs[0]["nodes"] + 1) if figs and \
            "job_pss_mb" in figs[0] else 0
        threads = figs[0].get("threads", 16) if figs else 16
        if per_node_kb and per_node_kb * (nodes + 1) > 0.8 * host_memory_kb():
            log("%d nodes: about %.1f GiB (%.0f MB per node at %d nodes) does not fit in "
                "%.1f GiB available; skipped" % (nodes, per_node_kb * (nodes + 1) / 2**20,
                                                 per_node_kb / 1024, figs[0]["nodes"],
                                                 host_memory_kb() / 2**20))
            figs.append({"nodes": nodes, "servers": max(1, nodes // 4),
                         "workers": nodes - max(1, nodes // 4), "failed": "memory"})
            continue
        if not raise_limits(nodes + 1, int(threads)):
            figs.append({"nodes": nodes, "servers": max(1, nodes // 4),
                         "workers": nodes - max(1, nodes // 4), "failed": "limits"})
            continue
        t0 = time.monotonic()
        figs.append(run_size(args, nodes))
        log("%d nodes done in %.0f s" % (nodes, time.monotonic() - t0))
    print_table(figs)
    print_targets(figs)
    if args.train:
        raise_limits(args.train_workers * 5 // 4 + 1, 32)
        run_train(args)
    failed = [f["nodes"] for f in figs if "failed" in f]
    print("scale_bench: %d sizes measured%s" % (
        len(figs) - len(failed),
        "; failed: " + ", ".join(map(str, failed)) if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
