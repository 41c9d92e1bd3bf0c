#!/usr/bin/env python3
"""python_bench: what the Python front-end costs against the C++ programs.

1. Training: examples/python/train_mnist.py against examples/train_mnist (the
   baseline, measured in the same run), MLP, `local` and `dist_sync` with 2
   workers + 2 servers through tracker/launch.py, default security: samples/s
   (the median over runs of the epochs after the first) and Python / C++.
2. kv.pushpull of one 1 KB and one 1 MB key from Python
   (bench/pushpull_bench.py) against KVStore::PushPull from C++
   (bench/pushpull_bench), on `local` and on `dist_sync` with 1 worker + 1
   server: microseconds per call and Python / C++.
3. (--parts iter) Module.fit fed by an iterator written in Python (an MXNet
   DataIter subclass's shape, batches sliced from numpy arrays) against the
   same arrays through kvtrain.io.NDArrayIter (the C++ iterator), MLP,
   `local`, in one process: samples/s and Python iterator / C++ iterator.

Runs alternate between the two sides, so a slow spell of the machine falls
on both. Example (after bazel build //python:kvtrain //examples:train_mnist
//bench:pushpull_bench):
  /usr/bin/python3 bench/python_bench.py --runs 3
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import dist_train_bench as dtb  # noqa: E402

PY = "/usr/bin/python3"
PUSHPULL = re.compile(r"pushpull bytes=(\d+) us=([0-9.]+)")


class CommandJob(dtb.Job):
    """A dist_train_bench job whose training program is `program` (argv)."""

    def __init__(self, args, program):
        super(CommandJob, self).__init__(args)
        self.program = program

    def command(self, net, store, workers, servers, secure, gc="none"):
        argv = super(CommandJob, self).command(net, store, workers, servers, secure, gc)
        i = argv.index(self.args.train)
        return argv[:i] + self.program + argv[i + 1:]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per row; the median is shown")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per training job (first not counted)")
    ap.add_argument("--num-examples", type=int, default=0, help="examples per epoch (0: 60,000)")
    ap.add_argument("--sizes", default="1024,1048576", help="pushpull bytes per key")
    ap.add_argument("--iters", type=int, default=300, help="pushpull calls per round")
    ap.add_argument("--parts", default="train,pushpull", help="train, pushpull, iter")
    ap.add_argument("--bin", default=os.path.join(ROOT, "bazel-bin"),
                    help="where examples/train_mnist and bench/pushpull_bench are built")
    return ap.parse_args(argv)


def train_rows(a):
    args = dtb.parse_args(["--epochs", str(a.epochs), "--num-examples", str(a.num_examples),
                           "--train", os.path.join(a.bin, "examples", "train_mnist")])
    cc = dtb.Job(args)
    py = CommandJob(args, [PY, os.path.join(ROOT, "examples", "python", "train_mnist.py")])
    rows = [("local", "local", 1, 0), ("dist_sync 2w2s", "dist_sync", 2, 2)]
    rates = {(name, side): [] for name, _, _, _ in rows for side in ("C++", "Python")}
    for r in range(a.runs):
        for name, store, w, s in rows:
            for side, job in (("C++", cc), ("Python", py)):
                rates[(name, side)].append(
                    dtb.row_rate(args, "mlp", job.run("mlp", store, w, s, True), w))
        print("  training round %d of %d done" % (r + 1, a.runs), flush=True)
    print()
    print("MLP training, samples/s (default security) | C++ train_mnist | Python train_mnist.py"
          " | Python / C++")
    for name, _, _, _ in rows:
        c = statistics.median(rates[(name, "C++")])
        p = statistics.median(rates[(name, "Python")])
        print("%-43s | %15.0f | %21.0f | %11.2fx" % (name, c, p, p / c))
    for k, v in sorted(rates.items()):
        print("  runs %s %s: %s" % (k[0], k[1], ", ".join("%.0f" % x for x in v)))


def pushpull_once(program, store, a):
    flags = ["--kv_store", store, "--sizes", a.sizes, "--iters", str(a.iters), "--rounds", "5"]
    if store == "local":
        argv = program + flags
    else:
        argv = [PY, os.path.join(ROOT, "tracker", "launch.py"), "-n", "1", "-s", "1",
                "--launcher", "local"] + program + flags
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    if p.returncode != 0:
        raise RuntimeError("failed: %s\n%s" % (" ".join(argv), p.stdout[-2000:] + p.stderr[-2000:]))
    return {int(b): float(us) for b, us in PUSHPULL.findall(p.stdout)}


def pushpull_rows(a):
    cc = [os.path.join(a.bin, "bench", "pushpull_bench")]
    py = [PY, os.path.join(HERE, "pushpull_bench.py")]
    sizes = [int(s) for s in a.sizes.split(",")]
    times = {}
    for r in range(a.runs):
        for store in ("local", "dist_sync"):
            for side, prog in (("C++", cc), ("Python", py)):
                for size, us in pushpull_once(prog, store, a).items():
                    times.setdefault((store, size, side), []).append(us)
        print("  pushpull round %d of %d done" % (r + 1, a.runs), flush=True)
    print()
    print("pushpull of one key, us per call   | C++ KVStore::PushPull | Python kv.pushpull"
          " | Python / C++")
    for store in ("local", "dist_sync"):
        for size in sizes:
            c = statistics.median(times[(store, size, "C++")])
            p = statistics.median(times[(store, size, "Python")])
            label = "%s%s, %s" % (store, " 1w1s" if store != "local" else "",
                                  "%d KB" % (size // 1024) if size < 1 << 20
                                  else "%d MB" % (size >> 20))
            print("%-35s| %21.1f | %18.1f | %11.2fx" % (label, c, p, p / c))


# One process training the MLP on random MNIST-shaped data for `epochs`
# epochs; argv: array|python, epochs, examples. Prints the samples/s of the
# median epoch after the first.
ITER_PROGRAM = r"""
import statistics, sys, time
import numpy as np
import kvtrain as kt
mode, epochs, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.RandomState(0)
x = rng.rand(n, 784).astype(np.float32)
y = rng.randint(0, 10, n).astype(np.float32)

class Batches(object):
    provide_data = [("data", (100, 784))]
    provide_label = [("softmax_label", (100,))]
    def __init__(self):
        self.i = 0
    def reset(self):
        self.i = 0
    def next(self):
        if self.i + 100 > n:
            raise StopIteration
        rows = slice(self.i, self.i + 100)
        self.i += 100
        return kt.io.DataBatch([x[rows]], [y[rows]], 0)

it = kt.io.NDArrayIter(x, y, batch_size=100) if mode == "array" else Batches()
h = kt.sym.Activation(kt.sym.FullyConnected(kt.sym.Variable("data"), num_hidden=128, name="fc1"),
                      act_type="relu")
h = kt.sym.Activation(kt.sym.FullyConnected(h, num_hidden=64, name="fc2"), act_type="relu")
net = kt.sym.SoftmaxOutput(kt.sym.FullyConnected(h, num_hidden=10, name="fc3"), name="softmax")
ends = [time.time()]
mod = kt.mod.Module(net)
mod.fit(it, num_epoch=epochs, optimizer_params={"learning_rate": 0.1},
        epoch_end_callback=lambda *a: ends.append(time.time()))
secs = [b - a for a, b in zip(ends[1:], ends[2:])]
print("samples/s %.1f" % (n / statistics.median(secs)))
"""
SAMPLES = re.compile(r"samples/s ([0-9.]+)")


def iter_rows(a):
    n = a.num_examples or 60000
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    rates = {"C++": [], "Python": []}
    for r in range(a.runs):
        for side, mode in (("C++", "array"), ("Python", "python")):
            p = subprocess.run([PY, "-c", ITER_PROGRAM, mode, str(a.epochs), str(n)],
                               capture_output=True, text=True, timeout=600, env=env)
            m = SAMPLES.search(p.stdout)
            if p.returncode != 0 or m is None:
                raise RuntimeError("iterator run (%s) failed:\n%s" % (mode, p.stderr[-2000:]))
            rates[side].append(float(m.group(1)))
        print("  iterator round %d of %d done" % (r + 1, a.runs), flush=True)
    print()
    print("MLP fit in one process, samples/s      | C++ iterator | Python iterator"
          " | Python / C++")
    c, p = statistics.median(rates["C++"]), statistics.median(rates["Python"])
    print("%-39s| %12.0f | %15.0f | %11.2fx" % ("local, NDArrayIter vs PythonIter", c, p, p / c))


def main(argv):
    a = parse_args(argv)
    parts = a.parts.split(",")
    print("python_bench: the Python front-end against the C++ programs, %d runs each, "
          "alternating" % a.runs)
    if "train" in parts:
        train_rows(a)
    if "pushpull" in parts:
        pushpull_rows(a)
    if "iter" in parts:
        iter_rows(a)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
