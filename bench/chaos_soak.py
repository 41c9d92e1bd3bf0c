#!/usr/bin/env python3
"""chaos_soak: a dist_sync job that loses a random worker or server every few
seconds, and its result against the same job where nothing died.

Runs examples/train_mnist under tracker/launch.py --launcher local twice with
the same seed: once as a plain job (the baseline: its final .params and
.states files, and its wall time), once with --server-replicas R and
--max-restarts (a large K) while this script SIGKILLs a random victim every
--every seconds of training: a worker (started again by the launcher, it
rejoins where the job is), or a server while fewer than R are away (started
again too, it copies its key ranges and is a copy again; the job never loses
every copy of a key range). Kills
stop once the last epoch begins (a worker killed after its goodbye is not
waited for). Prints each kill, how long each worker took to be back, the
wall time against the baseline's, and whether the final weights and
optimizer states are byte-identical to the baseline's; exits 1 when they
are not or the job failed.

Python stdlib only. Example (a few minutes):
  bench/chaos_soak.py --train bazel-bin/examples/train_mnist --epochs 12 \\
      --num-examples 30000 --every 3
"""

import argparse
import os
import random
import re
import selectors
import shutil
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from tracker.launch_testlib import kill_marked, new_marker, node_pid  # noqa: E402
from tracker.launch_testlib import start_launch, wait_no_processes  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", default=os.path.join(ROOT, "bazel-bin/examples/train_mnist"))
    ap.add_argument("--launch", default=os.path.join(ROOT, "tracker/launch.py"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=1, help="--server-replicas")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--num-examples", type=int, default=20000)
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--every", type=float, default=3.0, help="seconds between kills")
    ap.add_argument("--seed", type=int, default=1, help="chooses the victims")
    ap.add_argument("--timeout", type=float, default=900)
    return ap.parse_args(argv)


def job(a, prefix, chaos):
    args = ["-n", str(a.workers), "-s", str(a.servers),
            "--env", "KVTRAIN_STARTUP_TIMEOUT=120"]
    if chaos:
        args += ["--server-replicas", str(a.replicas), "--max-restarts", "1000"]
    return args + [a.train, "--kv-store=dist_sync", "--network=mlp", "--seed=5",
                   "--disp-batches=20", "--lr-step-epochs=2",
                   "--num-examples=%d" % a.num_examples, "--batch-size=%d" % a.batch_size,
                   "--num-epochs=%d" % a.epochs, "--model-prefix=" + prefix]


def final(a, prefix):
    with open("%s-%04d.params" % (prefix, a.epochs), "rb") as p, \
            open("%s-%04d.states" % (prefix, a.epochs), "rb") as s:
        return p.read(), s.read()


class Lines:
    """launch.py's output, line by line, without blocking longer than asked."""

    def __init__(self, popen):
        self.p = popen
        self.sel = selectors.DefaultSelector()
        self.sel.register(popen.stdout.fileno(), selectors.EVENT_READ)
        self.pending = b""
        self.text = []
        self.eof = False

    def poll(self, timeout):
        out = []
        if not self.eof and self.sel.select(timeout=timeout):
            chunk = os.read(self.p.stdout.fileno(), 65536)
            self.eof = not chunk
            self.pending += chunk
        while b"\n" in self.pending:
            line, self.pending = self.pending.split(b"\n", 1)
            out.append(line.decode(errors="replace"))
        self.text += out
        return out


def run_plain(a, prefix):
    start = time.monotonic()
    p = start_launch(job(a, prefix, chaos=False))
    out, _ = p.communicate(timeout=a.timeout)
    if p.returncode != 0:
        print(out)
        raise SystemExit("the baseline job failed (exit %d)" % p.returncode)
    return time.monotonic() - start


def run_chaos(a, prefix, marker, rng):
    start = time.monotonic()
    p = start_launch(job(a, prefix, chaos=True))
    lines = Lines(p)
    training = last_epoch = False
    next_kill = None
    away = {}           # worker rank -> when it was killed
    back_after = []     # seconds from a worker's SIGKILL to the scheduler's "is back"
    kills = []
    servers_dead = set()  # killed, not yet a copy again
    try:
        while p.poll() is None or not lines.eof:
            if time.monotonic() - start > a.timeout:
                raise SystemExit("the chaos job passed --timeout")
            for line in lines.poll(0.05):
                if re.search(r"Epoch\[\d+\] Batch\[", line) and not training:
                    training = True
                    next_kill = time.monotonic() + a.every
                if "Epoch[%d] Batch[" % (a.epochs - 1) in line:
                    last_epoch = True
                m = re.search(r"worker (\d+) \([^)]*\) is back \(started again", line)
                if m and int(m.group(1)) in away:
                    back_after.append(time.monotonic() - away.pop(int(m.group(1))))
                m = re.search(r"server (\d+) \([^)]*\) holds the key ranges it copies again",
                              line)
                if m:
                    servers_dead.discard(int(m.group(1)))
            if not training or last_epoch or p.poll() is not None or \
                    time.monotonic() < next_kill:
                continue
            victims = [("worker", r) for r in range(a.workers) if r not in away]
            if len(servers_dead) < a.replicas:
                victims += [("server", r) for r in range(a.servers) if r not in servers_dead]
            next_kill = time.monotonic() + a.every
            if not victims:
                continue
            role, rank = rng.choice(victims)
            pid = node_pid(marker, role, rank, program=os.path.basename(a.train))
            if pid is None:
                continue
            os.kill(pid, signal.SIGKILL)
            at = time.monotonic() - start
            kills.append((at, role, rank))
            print("  %6.1f s: SIGKILL %s %d" % (at, role, rank), flush=True)
            if role == "worker":
                away[rank] = time.monotonic()
            else:
                servers_dead.add(rank)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        left = wait_no_processes(marker, timeout=15)
        kill_marked(marker)
        if left:
            print("left running: %s" % left)
    return p.returncode, time.monotonic() - start, kills, back_after, "\n".join(lines.text)


def main(argv=None):
    a = parse_args(argv)
    if a.replicas < 1 or a.replicas >= a.servers:
        raise SystemExit("--replicas must be at least 1 and less than --servers")
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="kvtrain-chaos-")
    try:
        print("chaos_soak: dist_sync MLP, %d workers, %d servers (--server-replicas %d), "
              "%d epochs of %d examples, a kill every %g s" %
              (a.workers, a.servers, a.replicas, a.epochs, a.num_examples, a.every), flush=True)
        plain_s = run_plain(a, tmp + "/plain")
        reference = final(a, tmp + "/plain")
        print("baseline (nothing killed): %.1f s" % plain_s, flush=True)
        marker = new_marker()
        os.makedirs(os.path.join(tmp, marker))
        code, chaos_s, kills, back, out = run_chaos(a, os.path.join(tmp, marker, "run"),
                                                    marker, rng)
        if code != 0:
            print(out)
            print("chaos job failed (exit %d) after %d kills" % (code, len(kills)))
            return 1
        same = final(a, os.path.join(tmp, marker, "run")) == reference
        workers = sum(1 for _, role, _ in kills if role == "worker")
        print("chaos: %.1f s, %.2fx the baseline's time; %d kills (%d workers, %d servers)" %
              (chaos_s, chaos_s / plain_s, len(kills), workers, len(kills) - workers))
        if back:
            print("a killed worker was back (SIGKILL to the scheduler's 'is back') after "
                  "%.2f s median, %.2f s at most" % (statistics.median(back), max(back)))
        print("final weights and optimizer states byte-identical to the baseline's: %s" %
              ("yes" if same else "NO"))
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
