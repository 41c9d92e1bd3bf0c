#!/usr/bin/env python3
"""mxnet_face_bench: what an MXNet script pays for running on kvtrain's face.

Trains the MLP (and with --nets mlp,lenet also LeNet) with the MXNet-shaped
script the tests run (python/tests/mxnet_scripts/train_mnist.py with its
common/fit.py, `import mxnet as mx` resolving to python/compat/mxnet)
against the baseline measured in the same run, kvtrain's own
examples/python/train_mnist.py, at the same batch size, learning rate and
epochs, each with its own defaults otherwise (both log a speedometer line
every 100 batches). Rows: `local` and `dist_sync` with 2 workers + 2 servers
through tracker/launch.py, default security. Samples/s is the epoch's
examples over the median epoch time after the first ("Time cost", the C++
trainer's), over runs that alternate between the two sides; face /
kvtrain is the median over rounds of the ratio within a round (a slow
spell of the machine then weighs on both sides of it). Also prints each side's final validation
accuracy. Example (after bazel build //python:kvtrain):
  /usr/bin/python3 bench/mxnet_face_bench.py --runs 3
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"
LAUNCH = os.path.join(ROOT, "tracker", "launch.py")
FACE = os.path.join(ROOT, "python", "tests", "mxnet_scripts", "train_mnist.py")
KVTRAIN = os.path.join(ROOT, "examples", "python", "train_mnist.py")
MNIST = "/usr/share/datasets/fashion-mnist"
TIME_COST = re.compile(r"^(\[worker (\d+)\] )?Epoch\[(\d+)\].*Time cost=([0-9.]+)")
VALIDATION = re.compile(r"Validation-accuracy=([0-9.]+)")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per row and side")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per job (first not counted)")
    ap.add_argument("--num-examples", type=int, default=60000, help="training examples")
    ap.add_argument("--batch-size", type=int, default=64, help="the MXNet script's default")
    ap.add_argument("--nets", default="mlp", help="mlp, lenet")
    return ap.parse_args(argv)


def command(side, net, store, workers, servers, a):
    flags = ["--network", net, "--kv-store", store, "--num-epochs", str(a.epochs),
             "--batch-size", str(a.batch_size), "--num-examples", str(a.num_examples),
             "--lr", "0.05"]
    if side == "face":
        flags += ["--lr-step-epochs", "10"]
        program = [PY, FACE] + flags
    else:
        flags += ["--lr-step-epochs", ""]
        program = [PY, KVTRAIN] + flags
    if store == "local":
        return program
    return [PY, LAUNCH, "-n", str(workers), "-s", str(servers), "--launcher", "local"] + program


def run(side, net, store, workers, servers, a, workdir):
    env = dict(os.environ)
    env["PYTHONPATH"] = (os.path.join(ROOT, "python", "compat") + ":" if side == "face"
                         else "") + os.path.join(ROOT, "python")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    argv = command(side, net, store, workers, servers, a)
    p = subprocess.run(argv, env=env, cwd=workdir, capture_output=True, text=True, timeout=1800)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        raise RuntimeError("failed (exit %d): %s\n%s" % (p.returncode, " ".join(argv),
                                                         out[-2000:]))
    times = [float(m.group(4)) for m in map(TIME_COST.match, out.splitlines())
             if m and int(m.group(3)) >= 1]
    if not times:
        raise RuntimeError("no Time cost line after epoch 0:\n" + out[-2000:])
    accuracy = [float(x) for x in VALIDATION.findall(out)]
    return a.num_examples / statistics.median(times), accuracy[-1] if accuracy else float("nan")


def main(argv):
    a = parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="mxnet-face-bench-")
    os.mkdir(os.path.join(workdir, "data"))
    for f in os.listdir(MNIST):  # where MXNet's train_mnist.py reads
        os.symlink(os.path.join(MNIST, f), os.path.join(workdir, "data", f))
    rows = [("local", "local", 1, 0), ("dist_sync 2w2s", "dist_sync", 2, 2)]
    nets = a.nets.split(",")
    rates, accs = {}, {}
    print("mxnet_face_bench: %d runs per side, alternating; batch %d, %d examples, %d epochs"
          % (a.runs, a.batch_size, a.num_examples, a.epochs), flush=True)
    for r in range(a.runs):
        for net in nets:
            for name, store, w, s in rows:
                for side in ("kvtrain", "face"):
                    rate, acc = run(side, net, store, w, s, a, workdir)
                    rates.setdefault((net, name, side), []).append(rate)
                    accs.setdefault((net, name, side), []).append(acc)
        print("  round %d of %d done" % (r + 1, a.runs), flush=True)
    print()
    print("samples/s (default security)  | kvtrain train_mnist.py | MXNet-shaped script "
          "on the face | face / kvtrain | accuracy kvtrain, face")
    for net in nets:
        for name, _, _, _ in rows:
            k = statistics.median(rates[(net, name, "kvtrain")])
            f = statistics.median(rates[(net, name, "face")])
            ratio = statistics.median(x / y for x, y in zip(rates[(net, name, "face")],
                                                            rates[(net, name, "kvtrain")]))
            print("%-30s| %22.0f | %29.0f | %13.2fx | %.4f, %.4f"
                  % ("%s %s" % (net, name), k, f, ratio,
                     statistics.median(accs[(net, name, "kvtrain")]),
                     statistics.median(accs[(net, name, "face")])))
    for key, v in sorted(rates.items()):
        print("  runs %s: %s" % (" ".join(key), ", ".join("%.0f" % x for x in v)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
