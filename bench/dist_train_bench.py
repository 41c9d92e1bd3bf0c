#!/usr/bin/env python3
"""dist_train_bench: end-to-end training throughput through the servers.

Runs examples/train_mnist as a user does (tracker/launch.py --launcher local,
or ssh into an emulated cluster with --link) for every row below, with the
default security and again with --insecure, and prints samples/s per row
(the median over runs of the epochs after the first) with the ratios that
matter: each row against `local` in the same run, default security against
--insecure, dist_sync 2w2s against dist_allreduce 2w, dist_async and
dist_ssp (bounded staleness, its default of 2 steps) against dist_sync,
dist_sync 2w2s R=1 (--server-replicas 1) and K=1 (--max-restarts 1: the servers
keep each key's previous value) against dist_sync 2w2s. The runs go in rounds over every row, and each ratio is the
median over rounds of the ratio within a round (a slow spell of the machine
then weighs on both sides of it). With --link=1gbit|10gbit every process
runs in its own network namespace joined through a rate-limited bridge
(bench/emulated_cluster.py), with the CPU threads --launcher local would
give it (the namespaces share this machine's cores), and each row is also
shown against its ideal: compute time plus the bytes on the busiest link
over the link's rate; dist_sync and dist_async rows also against
bench/tcp_replay, the same step's messages over plain TCP on the same
links (dist_sync: each server answers a message once every worker's is
in; dist_async: each worker's as it comes in), with the ideal's compute
between steps.

Python stdlib only. Example:
  bench/dist_train_bench.py --train bazel-bin/examples/train_mnist
"""

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tracker"))

# (name, kv-store, workers, servers)
ROWS = [
    ("local", "local", 1, 0),
    ("dist_sync 1w1s", "dist_sync", 1, 1),
    ("dist_sync 2w1s", "dist_sync", 2, 1),
    ("dist_sync 2w2s", "dist_sync", 2, 2),
    # Each server's keys also on the other server (--server-replicas 1).
    ("dist_sync 2w2s R=1", "dist_sync+r1", 2, 2),
    # Dead workers waited for and started again (--max-restarts 1).
    ("dist_sync 2w2s K=1", "dist_sync+k1", 2, 2),
    ("dist_async 2w2s", "dist_async", 2, 2),
    ("dist_ssp 2w2s", "dist_ssp", 2, 2),
    ("dist_allreduce 2w", "dist_allreduce", 2, 0),
]
ROW_KEYS = {"local": "local", "sync1w1s": "dist_sync 1w1s",
            "sync2w1s": "dist_sync 2w1s", "sync2w2s": "dist_sync 2w2s", "sync2w2sr1": "dist_sync 2w2s R=1",
            "sync2w2sk1": "dist_sync 2w2s K=1",
            "async2w2s": "dist_async 2w2s", "ssp2w2s": "dist_ssp 2w2s",
            "allreduce2w": "dist_allreduce 2w"}
LINKS = {"loopback": None, "1gbit": 1e9, "10gbit": 10e9}
# Each model's parameter arrays (float32 elements), for the ideal under --link.
PARAMS = {"mlp": [784 * 128, 128, 128 * 64, 64, 64 * 10, 10],
          "lenet": [20 * 25, 20, 50 * 20 * 25, 50, 800 * 500, 500, 500 * 10, 10]}
BIGARRAY_BOUND = 65536  # KVTRAIN_BIGARRAY_BOUND's default
# Each compression's recommended min_bytes (docs/kvstore.md): fp16 every
# array (the default; its accuracy is that of float32), 2bit and 1bit only
# arrays of 64 KiB and more (a bias quantized to +-t costs accuracy and
# saves nothing on the wire).
GC_MIN_BYTES = {"fp16": 0, "2bit": 65536, "1bit": 65536}
PIECE_FLOATS = 16384   # KVTRAIN_PS_PIECE_BYTES' default between hosts, in floats
PIECES_PER_SLICE = 8   # kv::StoreSettings::kPiecesPerSliceAcrossHosts


def step_messages(net, servers):
    """A worker's push messages of one step as (server, bytes), in the order
    the stores send them: each server's small arrays together (one bucket),
    then each large array's slices, server by server, in pieces of at least
    PIECE_FLOATS, at most PIECES_PER_SLICE of them (kvstore/placement.h), as
    the stores cut them between hosts.
    The answers are as large."""
    small = [0] * servers
    large = []
    for n in sorted(PARAMS[net], reverse=True):
        if n >= BIGARRAY_BOUND and servers > 1:
            # Even split; the first n % servers slices take one element more.
            large += [(s, n // servers + (s < n % servers)) for s in range(servers)]
            continue
        # Whole, to the server holding the fewest so far.
        s = min(range(servers), key=lambda i: small[i] + sum(c for j, c in large if j == i))
        if n >= PIECE_FLOATS:
            large.append((s, n))
        else:
            small[s] += n
    out = [(s, 4 * small[s]) for s in range(servers) if small[s]]
    for s, count in large:
        pieces = max(1, min(-(-count // PIECE_FLOATS), PIECES_PER_SLICE))
        out += [(s, 4 * (count // pieces + (j < count % pieces))) for j in range(pieces)]
    return out


def server_floats(net, servers):
    """Elements each server holds: what a worker's step sends it."""
    return [sum(b for s, b in step_messages(net, servers) if s == i) / 4 for i in range(servers)]


TIME_COST = re.compile(r"^(?:\[(\w+) (\d+)\] )?Epoch\[(\d+)\].* Time cost=([0-9.]+)")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", default=os.path.join(ROOT, "bazel-bin/examples/train_mnist"),
                    help="the train_mnist binary")
    ap.add_argument("--launch", default=os.path.join(ROOT, "tracker/launch.py"))
    ap.add_argument("--nets", default="mlp,lenet", help="mlp, lenet")
    ap.add_argument("--rows", default=",".join(ROW_KEYS),
                    help="rows to run: " + ", ".join(ROW_KEYS))
    ap.add_argument("--security", default="default,insecure",
                    help="default (CURVE / same-host ipc, what a user gets), insecure")
    ap.add_argument("--runs", type=int, default=3, help="jobs per row; the median is shown")
    ap.add_argument("--epochs", type=int, default=3,
                    help="epochs per job; the first is warm-up and not counted")
    ap.add_argument("--num-examples", type=int, default=0,
                    help="training examples per epoch (0: all 60,000 for the MLP, "
                    "12,000 for LeNet, whose steps are 40 times longer)")
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--link", default="loopback", choices=sorted(LINKS),
                    help="loopback, or an emulated cluster with links of this rate")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per job")
    ap.add_argument("--gc", default="none",
                    help="gradient compressions to run the dist rows with (default security): "
                    "none, fp16, 2bit, 1bit; 2bit/fp16 or 1bit/fp16 (push-pulls bring "
                    "the weights back as halves: --gc-pull fp16); 2bit/servers or 1bit/servers "
                    "(dist_sync rows: the servers run the optimizer, --update_on_kvstore, where "
                    "by default the workers do and the servers answer each step's summed codes "
                    "exactly as levels); several add a compression table")
    ap.add_argument("--gc-threshold", type=float, default=2,
                    help="the 2bit threshold (train_mnist --gc-threshold)")
    ap.add_argument("--gc-min-bytes", type=int, default=None,
                    help="arrays of fewer bytes travel uncompressed (train_mnist "
                    "--gc-min-bytes; default: each type as docs/kvstore.md recommends, "
                    "%s)" % ", ".join("%s %d" % kv for kv in sorted(GC_MIN_BYTES.items())))
    ap.add_argument("--replay", default=os.path.join(ROOT, "bazel-bin/bench/tcp_replay"),
                    help="the tcp_replay binary (--link: the plain-TCP baseline of the "
                    "dist_sync and dist_async rows; skipped when it is not built)")
    ap.add_argument("--verbose", action="store_true", help="print every job's command")
    return ap.parse_args(argv)


class Job:
    """One train_mnist job; returns per-worker epoch times (epoch >= 1)."""

    def __init__(self, args, cluster=None):
        self.args = args
        self.cluster = cluster

    def command(self, net, store, workers, servers, secure, gc="none"):
        a = self.args
        train = [a.train, "--network", net, "--kv-store", store,
                 "--num-epochs", str(a.epochs), "--disp-batches", "0",
                 "--batch-size", str(a.batch_size),
                 "--num-examples", str(samples_per_epoch(a, net))]
        if gc != "none":
            kind, pull = split_gc(gc)
            train += ["--gc-type", kind, "--gc-threshold", str(a.gc_threshold),
                      "--gc-min-bytes", str(gc_min_bytes(a, kind))]
            if pull == "servers":
                train += ["--update_on_kvstore=true"]
            elif pull:
                train += ["--gc-pull", pull]
        if store == "local":
            return train
        argv = [sys.executable, a.launch, "-n", str(workers), "-s", str(servers)]
        if "+r" in store:  # "dist_sync+r1": with server replicas
            store, replicas = store.split("+r")
            train[train.index("--kv-store") + 1] = store
            argv += ["--server-replicas", replicas]
        if "+k" in store:  # "dist_sync+k1": dead workers started again
            store, restarts = store.split("+k")
            train[train.index("--kv-store") + 1] = store
            argv += ["--max-restarts", restarts]
        if not secure:
            argv.append("--insecure")
        if self.cluster:
            argv += self.cluster.launch_args(workers, servers)
        else:
            argv += ["--launcher", "local"]
        return argv + ["--timeout", str(a.timeout)] + train

    def run(self, net, store, workers, servers, secure, gc="none"):
        argv = self.command(net, store, workers, servers, secure, gc)
        if self.args.verbose:
            print("  $ " + " ".join(argv), flush=True)
        env = dict(os.environ)
        env.pop("KVTRAIN_INSECURE", None)
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        p = subprocess.run(argv, env=env, capture_output=True, text=True,
                           timeout=self.args.timeout + 60)
        if p.returncode != 0:
            tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-15:])
            raise RuntimeError("job failed (exit %d): %s\n%s" %
                               (p.returncode, " ".join(argv), tail))
        times = {}
        for line in p.stdout.splitlines():
            m = TIME_COST.match(line.strip())
            if m and int(m.group(3)) >= 1:
                rank = int(m.group(2) or 0)
                times.setdefault(rank, []).append(float(m.group(4)))
        if len(times) != workers:
            raise RuntimeError("expected Time cost lines from %d workers, got %d:\n%s" %
                               (workers, len(times), p.stdout[-2000:]))
        return times


def replay_rate(args, cluster, net, workers, servers, local_rate, answer="all"):
    """Samples/s of bench/tcp_replay on the cluster's links: `workers`
    replaying the step's messages to `servers` (hosts 0.. are the servers,
    the next ones the workers), with the `local` step's compute between
    steps; the servers answer as `answer` says (all: dist_sync, each:
    dist_async). None when tcp_replay is not built."""
    if not os.access(args.replay, os.X_OK) or not local_rate:
        return None
    compute_us = int(1e6 * args.batch_size / local_rate)
    port = 7390
    srv = [cluster.popen(h, [args.replay, "--role=server", "--port=%d" % port,
                             "--workers=%d" % workers, "--answer=" + answer])
           for h in range(servers)]
    try:
        addrs = ",".join("%s:%d" % (cluster.bed.addrs[h], port) for h in range(servers))
        msgs = ",".join("%d:%d" % m for m in step_messages(net, servers))
        wk = [cluster.popen(servers + w, [args.replay, "--role=worker", "--servers=" + addrs,
                                          "--messages=" + msgs, "--steps=300",
                                          "--compute_us=%d" % compute_us],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for w in range(workers)]
        comm = []
        for w in wk:
            out = w.communicate(timeout=args.timeout)[0]
            m = re.search(r"comm_us median (\d+)", out)
            if w.returncode != 0 or not m:
                raise RuntimeError("tcp_replay failed: %s" % out.strip())
            comm.append(float(m.group(1)))
    finally:
        for p in srv:
            p.kill()
            p.wait()
    step_us = compute_us + statistics.median(comm)
    return workers * args.batch_size * 1e6 / step_us


def samples_per_epoch(args, net):
    return args.num_examples or (60000 if net == "mlp" else 12000)


def row_rate(args, net, times_by_rank, workers):
    """Samples/s of one job: per epoch, the sum of each worker's rate."""
    per_worker = samples_per_epoch(args, net) / workers
    epochs = min(len(t) for t in times_by_rank.values())
    rates = []
    for e in range(epochs):
        rates.append(sum(per_worker / t[e] for t in times_by_rank.values()))
    return statistics.median(rates)


def ideal_rate(local_rate, net, workers, servers, bits_per_s):
    """Compute time plus the busiest link's bytes over its rate. Every
    process has its own link: a worker's carries the whole model each way
    per step; a server's carries what it holds from and to every worker
    (full duplex: one direction counts)."""
    if net not in PARAMS or not bits_per_s or servers == 0:
        return None
    model_bytes = 4.0 * sum(PARAMS[net])
    busiest = max(model_bytes, workers * 4.0 * max(server_floats(net, servers)))
    batch = 100.0
    step_compute = batch / local_rate
    step_wire = busiest * 8 / bits_per_s
    return workers * batch / (step_compute + step_wire)


GC_TYPES = ("none", "fp16", "2bit", "1bit")


def split_gc(gc):
    """'2bit/fp16' -> ('2bit', 'fp16'): the type and what push-pulls bring
    back ('' for the type's default; 'servers': the servers update, where by
    default the workers would)."""
    kind, _, pull = gc.partition("/")
    return kind, pull


def gc_min_bytes(args, kind):
    """The min_bytes a compression runs with: --gc-min-bytes, else the
    type's recommended setting (GC_MIN_BYTES)."""
    if kind == "none":
        return 0
    return args.gc_min_bytes if args.gc_min_bytes is not None else GC_MIN_BYTES[kind]


def level_bits(kind, workers):
    """kv::LevelBits: the bits that hold any sum of `workers` pushes."""
    k = {"2bit": 2 * workers, "1bit": workers}.get(kind, 99)
    return next((b for b in (1, 2, 4, 8) if k <= b), 0)


def wire_bytes(net, gc, min_bytes, workers=2, store="dist_sync"):
    """Bytes one worker pushes and pulls per step (every array once; a cut
    array's pieces each carry their own 4-byte header, or level table, left
    out here). 2bit and 1bit over dist_sync: by default the workers update
    and the answers are levels."""
    kind, pull_as = split_gc(gc)
    push = pull = 0
    for n in PARAMS[net]:
        g = "none" if 4 * n < min_bytes else kind
        half = g != "none" and (pull_as == "fp16" or (g == "fp16" and pull_as != "float32"))
        bits = level_bits(g, workers) if pull_as == "" and store == "dist_sync" else 0
        if bits:
            pull += 4 * 2 ** bits + -(-n * bits // 8)
        else:
            pull += 2 * n if half else 4 * n
        push += {"none": 4 * n, "fp16": 2 * n, "2bit": 4 + 4 * -(-n // 16),
                 "1bit": 4 + 4 * -(-n // 32)}[g]
    return push, pull


def per_round(rates, a, b):
    """Cell a's rate over cell b's in each round ([] if either cell did not
    run)."""
    ra, rb = rates.get(a), rates.get(b)
    if not ra or not rb:
        return []
    return [x / y for x, y in zip(ra, rb)]


def paired(rates, a, b):
    """The median over rounds of cell a's rate over cell b's in the same
    round (None if either cell did not run)."""
    r = per_round(rates, a, b)
    return statistics.median(r) if r else None


def fmt_rate(r):
    return "%8.0f" % r if r is not None else "       -"


def fmt_ratio(x):
    return "%6.2fx" % x if x is not None else "      -"


def main(argv):
    args = parse_args(argv)
    nets = [n for n in args.nets.split(",") if n]
    rows = [ROW_KEYS[r] for r in args.rows.split(",") if r]
    modes = [m for m in args.security.split(",") if m]
    for m in modes:
        if m not in ("default", "insecure"):
            sys.exit("dist_train_bench: --security: unknown mode %r (default, insecure)" % m)
    args.gcs = [g for g in args.gc.split(",") if g]
    for g in args.gcs:
        kind, pull = split_gc(g)
        if (kind not in GC_TYPES or pull not in ("", "fp16", "float32", "servers") or
                g == "none/fp16" or (pull == "servers" and kind not in ("2bit", "1bit"))):
            sys.exit("dist_train_bench: --gc: unknown compression %r (none, fp16, 2bit, 1bit, "
                     "2bit/fp16, 1bit/fp16, 2bit/servers, 1bit/servers)" % g)
    if "none" not in args.gcs:
        args.gcs.insert(0, "none")
    if "local" not in rows:
        rows.insert(0, "local")
    args.train = os.path.abspath(args.train)
    if not os.access(args.train, os.X_OK):
        sys.exit("dist_train_bench: %s is not an executable (bazel build //examples:train_mnist)"
                 % args.train)
    cluster = None
    if LINKS[args.link]:
        import emulated_cluster
        if not emulated_cluster.available():
            print("dist_train_bench: --link=%s skipped: %s" %
                  (args.link, emulated_cluster.UNAVAILABLE))
            return 0
        # A SIGTERM still takes the cluster down (through the finally below).
        signal.signal(signal.SIGTERM, lambda *_: sys.exit("dist_train_bench: terminated"))
        cluster = emulated_cluster.Cluster(hosts=4, rate=args.link).up()
    try:
        return report(args, nets, rows, modes, cluster)
    finally:
        if cluster:
            cluster.down()


def report(args, nets, rows, modes, cluster):
    job = Job(args, cluster)
    print("dist_train_bench: train_mnist through tracker/launch.py (%s), batch %d per worker, "
          "%s examples per epoch, %d epochs (the first not counted), median of %d runs"
          % ("emulated cluster, %s links" % args.link if cluster else "--launcher local",
             args.batch_size, ", ".join("%d (%s)" % (samples_per_epoch(args, n), n) for n in nets),
             args.epochs, args.runs))
    print("samples/s of the whole job (the sum over its workers); 'default' is what a user "
          "gets (CURVE and the sealed lane across hosts, same-host peers over private Unix sockets)")
    spec = {name: (store, w, s) for name, store, w, s in ROWS}
    # Rounds over every row, so that a slow spell of the machine falls on
    # all rows alike rather than on one row's runs.
    # Compressed rows (mode "default+2bit" etc.) for the dist rows.
    # dist_allreduce pulls no weights: it has no half-pull rows ("-"); only
    # over dist_sync do the workers update by default (/servers: not).
    def runs(store, g):
        pull = split_gc(g)[1]
        base = store.split("+")[0]  # "dist_sync+r1": with server replicas
        if "+k" in store and g != "none":
            return False  # what restarts cost is measured uncompressed
        return not ((pull and base == "dist_allreduce") or
                    (pull == "servers" and base != "dist_sync"))
    cells = [(net, name, mode) for net in nets for name in rows
             for mode in (["local"] if spec[name][0] == "local" else
                          modes + ["default+" + g for g in args.gcs
                                   if g != "none" and runs(spec[name][0], g)])]
    rates = {c: [] for c in cells}
    for r in range(args.runs):
        for net, name, mode in cells:
            store, w, s = spec[name]
            gc = mode.split("+")[1] if "+" in mode else "none"
            rates[(net, name, mode)].append(
                row_rate(args, net, job.run(net, store, w, s, mode != "insecure", gc), w))
        print("  round %d of %d done" % (r + 1, args.runs), flush=True)
    results = {}
    for c in cells:
        results[c] = statistics.median(rates[c])
        print("  %-5s %-18s %-13s %8.0f samples/s  (runs: %s)" %
              (c + (results[c], ", ".join("%.0f" % x for x in rates[c]))))
    print()
    ratio = lambda a, b: paired(rates, a, b)  # noqa: E731
    for net in nets:
        local = results.get((net, "local", "local"))
        head = "%-18s" % net
        for m in modes:
            head += " | %8s  vs local" % m
        if len(modes) == 2:
            head += " | default/insecure"
        replay = {}
        if cluster and local:
            for name in rows:
                store, w, s = spec[name]
                if store in ("dist_sync", "dist_async"):
                    replay[name] = replay_rate(args, cluster, net, w, s, local,
                                               "all" if store == "dist_sync" else "each")
        if cluster:
            head += " |    ideal  default/ideal"
        if any(replay.values()):
            head += " | plain TCP  default/plain"
        print(head)
        for name in rows:
            store, w, s = spec[name]
            line = "%-18s" % name
            for m in modes:
                cell = (net, name, "local" if store == "local" else m)
                line += " | %s %s" % (fmt_rate(results.get(cell)),
                                      fmt_ratio(ratio(cell, (net, "local", "local"))))
            if len(modes) == 2:
                line += " | %16s" % fmt_ratio(
                    ratio((net, name, "default"), (net, name, "insecure"))
                    if store != "local" else 1.0).strip()
            if cluster:
                ideal = ideal_rate(local, net, w, s, LINKS[args.link]) if local else None
                d = results.get((net, name, "default"))
                line += " | %s %13s" % (fmt_rate(ideal),
                                        fmt_ratio(d / ideal if d and ideal else None).strip())
            if any(replay.values()):
                r = replay.get(name)
                line += " |  %s %14s" % (fmt_rate(r),
                                         fmt_ratio(d / r if d and r else None).strip())
            print(line)
        for m in modes:
            sync_ar = ratio((net, "dist_sync 2w2s", m), (net, "dist_allreduce 2w", m))
            async_sync = ratio((net, "dist_async 2w2s", m), (net, "dist_sync 2w2s", m))
            ssp_sync = ratio((net, "dist_ssp 2w2s", m), (net, "dist_sync 2w2s", m))
            replicated = ratio((net, "dist_sync 2w2s R=1", m), (net, "dist_sync 2w2s", m))
            restartable = ratio((net, "dist_sync 2w2s K=1", m), (net, "dist_sync 2w2s", m))
            parts = []
            if sync_ar:
                parts.append("dist_sync 2w2s / dist_allreduce 2w = %.2fx" % sync_ar)
            if async_sync:
                parts.append("dist_async 2w2s / dist_sync 2w2s = %.2fx" % async_sync)
            if ssp_sync:
                parts.append("dist_ssp 2w2s / dist_sync 2w2s = %.2fx" % ssp_sync)
            if replicated:
                parts.append("dist_sync 2w2s R=1 / dist_sync 2w2s = %.2fx" % replicated)
            if restartable:
                parts.append("dist_sync 2w2s K=1 / dist_sync 2w2s = %.2fx" % restartable)
            if parts:
                print("  %s: %s" % (m, "; ".join(parts)))
        print()
        if len(args.gcs) > 1:
            report_compression(args, net, rows, spec, results, rates, cluster)
    return 0


def report_compression(args, net, rows, spec, results, rates, cluster):
    """samples/s of the dist rows per gradient compression (default
    security), against the same row uncompressed (and that ratio in each
    round, to read a target against the rounds' spread), and the bytes a
    worker moves per step."""
    ratio = lambda a, b: paired(rates, a, b)  # noqa: E731
    head = "%-18s" % (net + " compression")
    for g in args.gcs:
        head += " | %16s" % (g + (" vs none" if len(g) <= 8 else ""))
    print(head)
    for name in rows:
        if spec[name][0] == "local":
            continue
        line = "%-18s" % name
        base = (net, name, "default")
        for g in args.gcs:
            cell = (net, name, "default" if g == "none" else "default+" + g)
            line += " | %s %s" % (fmt_rate(results.get(cell)), fmt_ratio(ratio(cell, base)))
        print(line)
    for name in rows:
        if spec[name][0] == "local":
            continue
        base = (net, name, "default")
        parts = []
        for g in args.gcs:
            r = per_round(rates, (net, name, "default+" + g), base) if g != "none" else []
            if r:
                parts.append("%s %s" % (g, " ".join("%.2f" % x for x in r)))
        if parts:
            print("  %-18s per round vs none: %s" % (name, "; ".join(parts)))
    for g in args.gcs:
        min_bytes = gc_min_bytes(args, split_gc(g)[0])
        push, pull = wire_bytes(net, g, min_bytes)
        other = wire_bytes(net, g, min_bytes, store="dist_async")[1]
        print("  %-12s: a worker pushes %8.1f KB and pulls %8.1f KB per step%s" %
              (g, push / 1e3, pull / 1e3,
               " (dist_sync, levels for 2 workers; dist_async pulls %.1f KB)" % (other / 1e3)
               if other != pull else ""))
    kinds = sorted({split_gc(g)[0] for g in args.gcs} - {"none"})
    print("  (arrays travel uncompressed under %s bytes; 2bit threshold %g)" %
          (", ".join("%d (%s)" % (gc_min_bytes(args, k), k) for k in kinds),
           args.gc_threshold))
    print()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
