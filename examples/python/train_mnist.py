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

import logging
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import kvtrain as kt  # noqa: E402

import example_flags  # noqa: E402  (beside this file)


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
    p = example_flags.parser(__doc__.split("\n\n")[0])
    p.add_argument("--gpus", default="", help="GPUs to train on, e.g. 0,1 (empty: the CPU)")
    p.add_argument("--cpus", type=int, default=1,
                   help="CPU contexts to split each batch across")
    p.add_argument("--work-load-list", default="", help="relative batch share per device")
    p.add_argument("--metrics-file", default="", help="write metrics as JSON lines here")
    p.add_argument("--update-on-kvstore", "--update_on_kvstore", nargs="?", const="true",
                   default=None, choices=["true", "false"],
                   help="the store applies the optimizer (else the workers); not given: the "
                        "workers where the servers answer 2bit/1bit summed codes exactly as "
                        "levels (dist_sync, 2 or more workers)")
    return example_flags.parse(p, argv)


def contexts(args):
    if args.gpus:
        return [kt.gpu(int(i)) for i in args.gpus.split(",")]
    return [kt.cpu(i) for i in range(args.cpus)]


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    kv = kt.kv.create(args.kv_store)  # servers and the scheduler serve here
    example_flags.set_compression(args, kv)
    example_flags.set_async(args, kv)

    flat = args.network == "mlp"
    train = kt.io.MNISTIter(args.data_dir, train=True, batch_size=args.batch_size,
                            shuffle=True, seed=args.seed, flat=flat,
                            num_parts=kv.num_workers, part_index=kv.rank,
                            num_examples=args.num_examples)
    test = kt.io.MNISTIter(args.data_dir, train=False, batch_size=args.batch_size, flat=flat)

    n = min(args.num_examples, 60000) if args.num_examples > 0 else 60000
    batches = args.epoch_size or math.ceil(math.ceil(n / args.batch_size) / kv.num_workers)
    params = example_flags.optimizer_params(args, kv, batches)

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
            epoch_end_callback=checkpoint,
            update_on_kvstore=None if args.update_on_kvstore is None
            else args.update_on_kvstore == "true")
    acc = dict(mod.score(test, "acc"))["accuracy"]
    print("Test accuracy=%.4f" % acc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
