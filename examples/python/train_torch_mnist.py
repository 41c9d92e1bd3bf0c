#!/usr/bin/env python3
"""Trains a torch.nn MLP or LeNet on MNIST-format data (by default Debian's
Fashion-MNIST) with kvtrain's stores and servers (kvtrain.torch), with the
flags of examples/train_mnist. As one process, or as every process of a job:

    /usr/bin/python3 examples/python/train_torch_mnist.py --kv-store local
    tracker/launch.py -n 2 -s 2 --launcher local \\
        /usr/bin/python3 examples/python/train_torch_mnist.py --kv-store dist_sync

Checkpoints (--model-prefix P: P-NNNN.pt with the model, P-NNNN.states with
the optimizer's states on the servers) resume exactly (--load-epoch N).
Needs Debian's python3-torch.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import kvtrain as kt  # noqa: E402
import kvtrain.torch as kvt  # noqa: E402

import example_flags  # noqa: E402  (beside this file)


def mlp():
    return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                         nn.Linear(64, 10))


def lenet():
    return nn.Sequential(nn.Conv2d(1, 20, 5), nn.Tanh(), nn.MaxPool2d(2),
                         nn.Conv2d(20, 50, 5), nn.Tanh(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(800, 500), nn.Tanh(), nn.Linear(500, 10))


def parse_args(argv=None):
    p = example_flags.parser(__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (0: KVTRAIN_NUM_THREADS from launch.py, else torch's)")
    return example_flags.parse(p, argv)


def evaluate(model, it, flat):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        it.reset()
        for b in it:
            keep = b.data[0].shape[0] - b.pad
            out = model(torch.from_numpy(b.data[0]))
            pred = out[:keep].argmax(1)
            correct += (pred == torch.from_numpy(b.label[0][:keep]).long()).sum().item()
            total += keep
    model.train()
    return correct / total


def main(argv=None):
    a = parse_args(argv)
    kv = kvt.init(a.kv_store)  # servers and the scheduler serve here and exit
    example_flags.set_async(a, kv)
    example_flags.set_compression(a, kv)
    threads = a.threads or int(os.environ.get("KVTRAIN_NUM_THREADS", "0") or 0)
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(a.seed)
    flat = a.network == "mlp"
    model = mlp() if flat else lenet()
    if a.load_epoch > 0:
        saved = torch.load("%s-%04d.pt" % (a.model_prefix, a.load_epoch))
        model.load_state_dict(saved["model"])

    train = kt.io.MNISTIter(a.data_dir, train=True, batch_size=a.batch_size, shuffle=True,
                            seed=a.seed, flat=flat, num_parts=kv.num_workers,
                            part_index=kv.rank, num_examples=a.num_examples)
    test = kt.io.MNISTIter(a.data_dir, train=False, batch_size=a.batch_size, flat=flat)
    # Every worker of a synchronous store (or one bounding staleness) runs as
    # many steps as the largest part.
    batches = a.epoch_size or (train.max_part_batches if kv._handle.lockstep
                               else train.num_batches)
    params = example_flags.optimizer_params(a, kv, batches)
    opt = kvt.DistributedOptimizer(model.named_parameters(), kvstore=kv.type,
                                   optimizer=a.optimizer, optimizer_params=params)
    kvt.broadcast_parameters(model.state_dict())
    if a.load_epoch > 0:
        opt.load_states("%s-%04d.states" % (a.model_prefix, a.load_epoch))
    loss_fn = nn.CrossEntropyLoss()

    def save(epoch):
        if a.model_prefix and kv.rank == 0:
            torch.save({"model": model.state_dict(), "epoch": epoch + 1},
                       "%s-%04d.pt" % (a.model_prefix, epoch + 1))
            opt.save_states("%s-%04d.states" % (a.model_prefix, epoch + 1))

    def next_batch(epoch):
        b = train.next_batch()
        if b is None:  # this part is shorter than the epoch: start it over
            train.start_epoch(epoch)
            b = train.next_batch()
        return b

    first, skip = a.load_epoch, 0
    if kv.resume_step > 0:
        # Started again in place of a dead worker (launch.py --max-restarts):
        # go on with the batch of this part the job is at.
        first += kv.resume_step // batches
        skip = kv.resume_step % batches
        if skip == 0 and first > a.load_epoch:
            save(first - 1)  # the dead one may have died before it
    for epoch in range(first, a.num_epochs):
        train.start_epoch(epoch)
        for _ in range(skip):
            next_batch(epoch)
        t0 = window = time.time()
        correct = seen = 0
        loss_sum = 0.0
        for n in range(skip, batches):
            b = next_batch(epoch)
            x = torch.from_numpy(b.data[0])
            y = torch.from_numpy(b.label[0]).long()
            opt.zero_grad()
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            keep = x.shape[0] - b.pad
            correct += (out[:keep].argmax(1) == y[:keep]).sum().item()
            seen += keep
            loss_sum += loss.item() * keep
            if a.disp_batches and (n + 1) % a.disp_batches == 0:
                speed = a.disp_batches * a.batch_size / (time.time() - window)
                window = time.time()
                print("Epoch[%d] Batch[%d] Speed: %.0f samples/sec accuracy=%f" %
                      (epoch, n + 1, speed, correct / seen), flush=True)
        cost = time.time() - t0
        acc = evaluate(model, test, flat)
        stale = ""
        if kv.type in ("dist_async", "dist_ssp"):
            r = kv.staleness_report()  # this worker's pushes this epoch
            stale = " staleness-mean=%f staleness-max=%d" % (r["mean"], r["max"])
        lost = kv.server_losses()  # --server-replicas: servers lost this epoch
        if lost["servers"]:
            stale += " servers-lost=%d failover-pause-seconds=%f" % (
                lost["servers"], lost["pause_seconds"])
        print("Epoch[%d] Train-accuracy=%f Train-cross-entropy=%f Validation-accuracy=%f%s "
              "Time cost=%.3f" % (epoch, correct / seen, loss_sum / seen, acc, stale, cost),
              flush=True)
        save(epoch)
        skip = 0
    opt.synchronize()  # dist_async: the servers' final model, the same on every worker
    print("Test accuracy=%.4f" % evaluate(model, test, flat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
