#!/usr/bin/env python3
"""torch_ps_bench: PyTorch models trained through kvtrain against PyTorch's own
data parallelism, in one run.

For the MLP and LeNet of examples/python/train_torch_mnist.py, batch 100 per
process, 1 torch thread per process, samples/s of the whole job (the median
over runs of the epochs after the first):
  - PyTorch alone, one process (bench/torch_ddp_mnist.py --world-size 1);
  - DistributedDataParallel over gloo, 2 processes (the baseline);
  - kvtrain dist_sync, 2 workers + 2 servers, and kvtrain dist_allreduce, 2
    workers (train_torch_mnist.py through tracker/launch.py), with kvtrain's
    default security (DDP has none) and again with --insecure;
and each row against DDP. Runs alternate between rows. Example:
  /usr/bin/python3 bench/torch_ps_bench.py --runs 3
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
from python_bench import CommandJob  # noqa: E402
from testbed import free_port  # noqa: E402  (tracker/, on the path by dist_train_bench)

PY = "/usr/bin/python3"
EPOCH = re.compile(r"Epoch\[(\d+)\].* Time cost=([0-9.]+)")


def torch_rate(a, net, world):
    """Samples/s of a plain PyTorch (world 1) or DDP (world > 1) job."""
    port = free_port()
    n = a.num_examples or (60000 if net == "mlp" else 12000)
    procs = [subprocess.Popen([PY, os.path.join(HERE, "torch_ddp_mnist.py"), "--network", net,
                               "--world-size", str(world), "--rank", str(r), "--port", str(port),
                               "--num-epochs", str(a.epochs), "--num-examples", str(n)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    times = {}
    for r, p in enumerate(procs):
        out, _ = p.communicate(timeout=900)
        if p.returncode != 0:
            raise RuntimeError("torch_ddp_mnist failed:\n" + out[-2000:])
        times[r] = [float(t) for e, t in EPOCH.findall(out) if int(e) >= 1]
    per = n / world
    return statistics.median(sum(per / t[e] for t in times.values())
                             for e in range(min(len(t) for t in times.values())))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3, help="epochs per job (first not counted)")
    ap.add_argument("--num-examples", type=int, default=0,
                    help="examples per epoch (0: 60,000 for the MLP, 12,000 for LeNet)")
    ap.add_argument("--nets", default="mlp,lenet")
    ap.add_argument("--security", default="default,insecure")
    a = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch_ps_bench: skipped: /usr/bin/python3 has no torch (tools/setup.sh installs "
              "python3-torch)")
        return 0
    modes = a.security.split(",")
    dargs = dtb.parse_args(["--epochs", str(a.epochs), "--num-examples", str(a.num_examples)])
    job = CommandJob(dargs, [PY, os.path.join(ROOT, "examples", "python", "train_torch_mnist.py"),
                             "--threads", "1"])
    rows = [("PyTorch, 1 process", None), ("DDP gloo 2 processes", None)]
    for m in modes:
        rows += [("kvtrain dist_sync 2w2s %s" % m, ("dist_sync", 2, 2, m == "default")),
                 ("kvtrain dist_allreduce 2w %s" % m, ("dist_allreduce", 2, 0, m == "default"))]
    nets = a.nets.split(",")
    rates = {(net, name): [] for net in nets for name, _ in rows}
    print("torch_ps_bench: PyTorch models, batch 100 per process, 1 torch thread per process, "
          "%d epochs (the first not counted), median of %d runs" % (a.epochs, a.runs))
    for r in range(a.runs):
        for net in nets:
            for name, spec in rows:
                if spec is None:
                    rate = torch_rate(a, net, 1 if name.startswith("PyTorch") else 2)
                else:
                    store, w, s, secure = spec
                    rate = dtb.row_rate(dargs, net, job.run(net, store, w, s, secure), w)
                rates[(net, name)].append(rate)
        print("  round %d of %d done" % (r + 1, a.runs), flush=True)
    for net in nets:
        ddp = statistics.median(rates[(net, "DDP gloo 2 processes")])
        print()
        print("%-34s | samples/s | vs DDP" % net)
        for name, _ in rows:
            v = statistics.median(rates[(net, name)])
            print("%-34s | %9.0f | %5.2fx   (runs: %s)" % (
                name, v, v / ddp, ", ".join("%.0f" % x for x in rates[(net, name)])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
