#!/usr/bin/env python3
"""Trains an MLP or LeNet on MNIST-format data (by default Debian's
Fashion-MNIST) with any KVStore type: the Python twin of examples/train_mnist,
with the same flags. As one process:

    /usr/bin/python3 examples/python/train_mnist.py --network lenet --num-epochs 3

or as every process of a job (servers and the scheduler serve inside
kv.create and exit there):

    tracker/launch.py -n 2 -s 2 --launcher local \\
        /usr/bin/python3 examples/python/train_mnist.py --kv-store dist_sync

Needs the package on PYTHONPATH (bazel build //python:kvtrain; export
PYTHONPATH=$PWD/python); see docs/python.md.
"""

import argparse
import logging
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import kvtrain as kt  # noqa: E402


def mlp():
    data = kt.sym.Variable("data")
    net = kt.sym.FullyConnected(data, num_hidden=128, name="fc1")
    net = kt.sym.Activation(net, act_type="relu", name="relu1")
    net = kt.sym.FullyConnected(net, num_hidden=64, name="fc2")
    net = kt.sym.Activation(net, act_type="relu", name="relu2")
    net = kt.sym.FullyConnected(net, num_hidden=10, name="fc3")
    return kt.sym.SoftmaxOutput(net, name="softmax")


def lenet():
    data = kt.sym.Variable("data")
    net = kt.sym.Convolution(data, kernel=(5, 5), num_filter=20, name="conv1")
    net = kt.sym.Activation(net, act_type="tanh", name="tanh1")
    net = kt.sym.Pooling(net, pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool1")
    net = kt.sym.Convolution(net, kernel=(5, 5), num_filter=50, name="conv2")
    net = kt.sym.Activation(net, act_type="tanh", name="tanh2")
    net = kt.sym.Pooling(net, pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool2")
    net = kt.sym.Flatten(net, name="flatten")
    net = kt.sym.FullyConnected(net, num_hidden=500, name="fc1")
    net = kt.sym.Activation(net, act_type="tanh", name="tanh3")
    net = kt.sym.FullyConnected(net, num_hidden=10, name="fc2")
    return kt.sym.SoftmaxOutput(net, name="softmax")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--network", default="mlp", choices=["mlp", "lenet"],
                   help="mlp (784-128-64-10, ReLU) or lenet")
    p.add_argument("--kv-store", default="local",
                   help="local, device, dist_sync, dist_device_sync, dist_async or dist_allreduce")
    p.add_argument("--gpus", default="", help="GPUs to train on, e.g. 0,1 (empty: the CPU)")
    p.add_argument("--cpus", type=int, default=1,
                   help="CPU contexts to split each batch across")
    p.add_argument("--work-load-list", default="", help="relative batch share per device")
    p.add_argument("--batch-size", type=int, default=100, help="examples per batch (per worker)")
    p.add_argument("--num-epochs", type=int, default=10)
    p.add_argument("--epoch-size", type=int, default=0,
                   help="batches per epoch per worker (0: this worker's part of the data)")
    p.add_argument("--model-prefix", default="", help="checkpoint prefix")
    p.add_argument("--load-epoch", type=int, default=0,
                   help="resume from the checkpoint of this epoch")
    p.add_argument("--data-dir", default=kt.io.DEFAULT_MNIST_DIR)
    p.add_argument("--num-examples", type=int, default=0,
                   help="use only the first N training examples (0: all)")
    p.add_argument("--metrics-file", default="", help="write metrics as JSON lines here")
    p.add_argument("--disp-batches", type=int, default=100, help="speedometer period (0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--optimizer", default="sgd", choices=list(kt.optimizer.NAMES))
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--wd", type=float, default=0.0001)
    p.add_argument("--lr-factor", type=float, default=0.2)
    p.add_argument("--lr-step-epochs", default="6,8")
    args = p.parse_args(argv)
    if args.batch_size < 1:
        p.error("--batch-size=%d: expected a positive number of examples" % args.batch_size)
    if args.load_epoch > 0 and not args.model_prefix:
        p.error("--load-epoch needs --model-prefix")
    if args.num_epochs < args.load_epoch:
        p.error("--num-epochs is below --load-epoch")
    return args


def contexts(args):
    if args.gpus:
        return [kt.gpu(int(i)) for i in args.gpus.split(",")]
    return [kt.cpu(i) for i in range(args.cpus)]


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    kv = kt.kv.create(args.kv_store)  # servers and the scheduler serve here

    flat = args.network == "mlp"
    train = kt.io.MNISTIter(args.data_dir, train=True, batch_size=args.batch_size,
                            shuffle=True, seed=args.seed, flat=flat,
                            num_parts=kv.num_workers, part_index=kv.rank,
                            num_examples=args.num_examples)
    test = kt.io.MNISTIter(args.data_dir, train=False, batch_size=args.batch_size, flat=flat)

    n = min(args.num_examples, 60000) if args.num_examples > 0 else 60000
    batches = args.epoch_size or math.ceil(math.ceil(n / args.batch_size) / kv.num_workers)
    params = {"learning_rate": args.lr, "wd": args.wd}
    if args.optimizer in ("sgd", "nag"):
        params["momentum"] = args.momentum
    if args.lr_step_epochs and args.lr_factor != 1.0:
        # The schedule counts updates: dist_async makes one per worker's batch.
        updates = batches * (kv.num_workers if kv.type == "dist_async" else 1)
        steps = [int(e) * updates for e in args.lr_step_epochs.split(",")]
        params["lr_scheduler"] = kt.lr_scheduler.MultiFactorScheduler(steps, args.lr_factor)

    net = mlp() if flat else lenet()
    work_load = [float(w) for w in args.work_load_list.split(",")] if args.work_load_list else None
    if args.load_epoch > 0:
        mod = kt.mod.Module.load(args.model_prefix, args.load_epoch, load_optimizer_states=True,
                                 context=contexts(args), work_load_list=work_load)
    else:
        mod = kt.mod.Module(net, context=contexts(args), work_load_list=work_load)
    checkpoint = kt.callback.do_checkpoint(args.model_prefix) if args.model_prefix else None
    mod.fit(train, eval_data=test, eval_metric=["acc", "ce"], kvstore=kv,
            optimizer=args.optimizer, optimizer_params=params,
            initializer=kt.init.Xavier(seed=args.seed), num_epoch=args.num_epochs,
            begin_epoch=args.load_epoch, epoch_size=args.epoch_size or None,
            disp_batches=args.disp_batches, metrics_file=args.metrics_file,
            epoch_end_callback=checkpoint)
    acc = dict(mod.score(test, "acc"))["accuracy"]
    print("Test accuracy=%.4f" % acc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
