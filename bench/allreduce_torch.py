#!/usr/bin/python3
"""PyTorch gloo peer of allreduce_bench, on 127.0.0.1, one thread per rank.

  allreduce_torch.py allreduce --ranks N --sizes B1,B2,.. --seconds S
      prints `<bytes> <seconds per all_reduce>` per size (rank 0's mean);
  allreduce_torch.py mlp --ranks N --batch 100 --seconds S
      the 784-128-64-10 MLP with SGD; N > 1 wraps it in
      DistributedDataParallel; prints `samples_per_s <total over ranks>`.

Exits with status 3 when torch is not installed (the caller skips it).
"""
import argparse
import os
import socket
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:
    print("torch is not installed for " + sys.executable)
    sys.exit(3)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(fn, seconds):
    """Mean seconds per call over at least 3 calls and `seconds`; every rank
    runs the same count (rank 0's choice, broadcast)."""
    for _ in range(2):
        fn()
    start = time.perf_counter()
    fn()
    one = max(time.perf_counter() - start, 1e-6)
    count = torch.tensor([max(3, int(seconds / one))])
    dist.broadcast(count, 0)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(int(count.item())):
        fn()
    return (time.perf_counter() - start) / int(count.item())


def allreduce_rank(rank, args, port, queue):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=args.ranks)
    for size in args.sizes:
        t = torch.ones(max(1, size // 4))
        sec = timed(lambda: dist.all_reduce(t), args.seconds)
        if rank == 0:
            queue.put((size, sec))
    dist.destroy_process_group()


def mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(784, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 10))


def mlp_rank(rank, args, port, queue):
    torch.set_num_threads(1)
    torch.manual_seed(1)
    net = mlp()
    if args.ranks > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                                rank=rank, world_size=args.ranks)
        net = torch.nn.parallel.DistributedDataParallel(net)
    data = [torch.rand(args.batch, 784) for _ in range(10)]
    labels = [torch.randint(0, 10, (args.batch,)) for _ in range(10)]
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    step = [0]

    def one():
        i = step[0] % 10
        step[0] += 1
        opt.zero_grad()
        loss_fn(net(data[i]), labels[i]).backward()
        opt.step()

    if args.ranks > 1:
        sec = timed(one, args.seconds)
        dist.destroy_process_group()
    else:
        for _ in range(10):
            one()
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            one()
            n += 1
        sec = (time.perf_counter() - start) / n
    if rank == 0:
        queue.put(args.batch * args.ranks / sec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["allreduce", "mlp"])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sizes", default="1024")
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--batch", type=int, default=100)
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    target = allreduce_rank if args.what == "allreduce" else mlp_rank
    procs = [ctx.Process(target=target, args=(r, args, port, queue))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    results = []
    want = len(args.sizes) if args.what == "allreduce" else 1
    while len(results) < want:
        results.append(queue.get(timeout=600))
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        sys.exit(1)
    for r in results:
        if args.what == "allreduce":
            print("%d %.9f" % r)
        else:
            print("samples_per_s %.1f" % r)


if __name__ == "__main__":
    main()
