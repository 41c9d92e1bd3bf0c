#!/usr/bin/env python3
"""async_accuracy_bench: what asynchronous training and 2bit compression
cost in accuracy, and what bounded staleness, staleness-aware updates and
momentum correction win back.

Trains examples/train_mnist's MLP on the bundled Fashion-MNIST as a user
does (tracker/launch.py --launcher local, default security) in every
configuration below, once per seed, and prints each one's test accuracy
(both workers end with the servers' final weights, so they agree), its mean
over the seeds, and the difference to its baseline's mean: one process
(`local`) for the asynchronous rows, `dist_sync` for the bounded and the
compressed ones. The samples/s column is the job's (the sum over its
workers) over the epochs after the first.

Python stdlib only. Example:
  bench/async_accuracy_bench.py --train bazel-bin/examples/train_mnist --seeds 0,1,2
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (name, baseline, workers, servers, epochs, flags)
ROWS = [
    ("local", None, 1, 0, 3, ["--kv-store=local"]),
    ("dist_sync 2w2s", None, 2, 2, 3, ["--kv-store=dist_sync"]),
    ("dist_async 2w2s", "local", 2, 2, 3, ["--kv-store=dist_async"]),
    ("dist_async 2w2s staleness-lr", "local", 2, 2, 3,
     ["--kv-store=dist_async", "--async-lr=staleness"]),
    ("dist_async 2w1s lr 0.1", "local", 2, 1, 3, ["--kv-store=dist_async", "--lr=0.1"]),
    ("dist_async 2w1s lr 0.1 staleness-lr", "local", 2, 1, 3,
     ["--kv-store=dist_async", "--lr=0.1", "--async-lr=staleness"]),
    ("dist_sync 2w2s 5 epochs", None, 2, 2, 5, ["--kv-store=dist_sync"]),
    ("dist_ssp s=2 2w2s 5 epochs", "dist_sync 2w2s 5 epochs", 2, 2, 5, ["--kv-store=dist_ssp"]),
    ("dist_ssp s=2 staleness-lr 5 epochs", "dist_sync 2w2s 5 epochs", 2, 2, 5,
     ["--kv-store=dist_ssp", "--async-lr=staleness"]),
    ("dist_sync 2bit t=0.5", "dist_sync 2w2s", 2, 2, 3,
     ["--kv-store=dist_sync", "--gc-type=2bit", "--gc-threshold=0.5"]),
    ("dist_sync 2bit auto", "dist_sync 2w2s", 2, 2, 3,
     ["--kv-store=dist_sync", "--gc-type=2bit", "--gc-threshold=auto"]),
]
ACCURACY = re.compile(r"Test accuracy=([0-9.]+)")
TIME_COST = re.compile(r"^(\[worker (\d+)\] )?Epoch\[(\d+)\].*Time cost=([0-9.]+)$")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", default=os.path.join(ROOT, "bazel-bin/examples/train_mnist"))
    ap.add_argument("--launch", default=os.path.join(ROOT, "tracker/launch.py"))
    ap.add_argument("--seeds", default="0,1,2", help="one job per row and seed")
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--num-examples", type=int, default=0, help="0: all 60,000")
    ap.add_argument("--epochs", type=int, default=0,
                    help="epochs of every row (0: each row's own, 3 or 5)")
    ap.add_argument("--rows", default="", help="names of the rows to run, comma-separated "
                    "(default: all; a row's baseline runs too)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per job")
    return ap.parse_args(argv)


def run(args, workers, servers, epochs, flags, seed):
    train = [args.train, "--disp-batches=0", "--batch-size=%d" % args.batch_size,
             "--num-epochs=%d" % epochs, "--seed=%d" % seed] + flags
    if args.num_examples:
        train.append("--num-examples=%d" % args.num_examples)
    argv = train if workers == 1 and servers == 0 else [
        sys.executable, args.launch, "-n", str(workers), "-s", str(servers),
        "--launcher", "local", "--timeout", str(int(args.timeout))] + train
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    p = subprocess.run(argv, env=env, capture_output=True, text=True,
                       timeout=args.timeout + 60)
    out = p.stdout + p.stderr
    accs = [float(a) for a in ACCURACY.findall(out)]
    if p.returncode != 0 or len(accs) != workers:
        raise RuntimeError("job failed (exit %d): %s\n%s" % (
            p.returncode, " ".join(argv), "\n".join(out.strip().splitlines()[-15:])))
    if len(set(accs)) != 1:
        raise RuntimeError("the workers ended with different models: %s" % accs)
    # samples/s over the epochs after the first: each worker's, summed.
    secs = {}
    for line in p.stdout.splitlines():
        m = TIME_COST.match(line.strip())
        if m and int(m.group(3)) >= 1:
            secs.setdefault(int(m.group(2) or 0), []).append(float(m.group(4)))
    examples = args.num_examples or 60000
    rate = sum(examples / workers / statistics.mean(t) for t in secs.values()) if secs else 0.0
    return accs[0], rate


def main(argv=None):
    args = parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = ROWS
    if args.rows:
        wanted = set(args.rows.split(","))
        unknown = wanted - {r[0] for r in ROWS}
        if unknown:
            print("unknown row(s): %s" % ", ".join(sorted(unknown)), file=sys.stderr)
            return 2
        wanted |= {r[1] for r in ROWS if r[0] in wanted and r[1]}
        rows = [r for r in ROWS if r[0] in wanted]
    print("async_accuracy_bench: MLP on Fashion-MNIST, batch %d per worker, lr 0.05, "
          "momentum 0.9 unless a row says otherwise; seeds %s" % (args.batch_size, args.seeds))
    results = {}
    for name, base, workers, servers, epochs, flags in rows:
        e = args.epochs or epochs
        accs, rates = [], []
        for seed in seeds:
            acc, rate = run(args, workers, servers, e, flags, seed)
            accs.append(acc)
            rates.append(rate)
        results[name] = (accs, statistics.median(rates))
        mean = statistics.mean(accs)
        diff = ""
        if base:
            diff = "%+.4f vs %s" % (mean - statistics.mean(results[base][0]), base)
        print("%-38s | %s | mean %.4f | %7.0f samples/s | %s" % (
            name, " ".join("%.4f" % a for a in accs), mean, results[name][1], diff),
            flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
