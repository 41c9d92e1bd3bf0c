#!/usr/bin/env python3
"""The PyTorch baselines of bench/torch_ps_bench.py: the models and loop of
examples/python/train_torch_mnist.py, trained by plain PyTorch in one
process (--world-size 1) or by DistributedDataParallel over gloo
(--world-size N --rank R --port P, one process per rank), printing the same
`Epoch[e] ... Time cost=` lines. Run with /usr/bin/python3."""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import train_torch_mnist as ex  # noqa: E402  (its models)

import kvtrain as kt  # noqa: E402  (its MNIST reader only)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--network", default="mlp", choices=["mlp", "lenet"])
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--num-epochs", type=int, default=3)
    ap.add_argument("--num-examples", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    flat = a.network == "mlp"
    model = ex.mlp() if flat else ex.lenet()
    if a.world_size > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a.port,
                                world_size=a.world_size, rank=a.rank)
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    train = kt.io.MNISTIter(train=True, batch_size=a.batch_size, shuffle=True, flat=flat,
                            num_parts=a.world_size, part_index=a.rank,
                            num_examples=a.num_examples)
    batches = train.max_part_batches
    for epoch in range(a.num_epochs):
        train.start_epoch(epoch)
        t0 = time.time()
        for _ in range(batches):
            b = train.next_batch()
            if b is None:
                train.start_epoch(epoch)
                b = train.next_batch()
            opt.zero_grad()
            loss_fn(model(torch.from_numpy(b.data[0])),
                    torch.from_numpy(b.label[0]).long()).backward()
            opt.step()
        print("Epoch[%d] Time cost=%.3f" % (epoch, time.time() - t0), flush=True)
    if a.world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
