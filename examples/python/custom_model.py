#!/usr/bin/env python3
"""A model and data of your own: a 3-layer MLP with dropout, on data made in
numpy (points on three interleaved spirals in the plane, lifted to 16
features with fixed random projections), trained with any store type:

    /usr/bin/python3 examples/python/custom_model.py                  # local
    tracker/launch.py -n 2 -s 2 --launcher local \\
        /usr/bin/python3 examples/python/custom_model.py --kv-store dist_sync

Every worker makes the same data (same seed) and trains on its part; the
servers and the scheduler serve inside kv.create. Any array a numpy program
can load trains the same way.
"""

import argparse
import logging
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import kvtrain as kt  # noqa: E402


def spirals(n, classes=3, features=16, seed=0):
    """n points per class on `classes` spirals, as (n * classes, features)."""
    rng = np.random.RandomState(seed)
    t = np.sqrt(rng.rand(n * classes)) * 3 * np.pi
    label = np.repeat(np.arange(classes), n)
    angle = t + label * 2 * np.pi / classes
    xy = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1) / (3 * np.pi)
    xy += rng.normal(scale=0.02, size=xy.shape)
    lift = rng.normal(size=(2, features))
    x = np.concatenate([xy, np.tanh(xy @ lift)], axis=1)[:, :features]
    order = rng.permutation(len(x))
    return x[order].astype(np.float32), label[order].astype(np.float32)


def network(hidden, dropout, classes):
    net = kt.sym.Variable("data")
    for i, h in enumerate(hidden):
        net = kt.sym.FullyConnected(net, num_hidden=h, name="fc%d" % (i + 1))
        net = kt.sym.Activation(net, act_type="relu", name="relu%d" % (i + 1))
        net = kt.sym.Dropout(net, p=dropout, name="drop%d" % (i + 1))
    net = kt.sym.FullyConnected(net, num_hidden=classes, name="out")
    return kt.sym.SoftmaxOutput(net, name="softmax")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kv-store", default="local")
    p.add_argument("--num-epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=50, help="per worker")
    p.add_argument("--hidden", default="128,128,64", help="sizes of the hidden layers")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--points", type=int, default=3000, help="training points per class")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    kv = kt.kv.create(args.kv_store)
    x, y = spirals(args.points + 1000)
    split = 3 * args.points
    train = kt.io.NDArrayIter(x[:split], y[:split], batch_size=args.batch_size, shuffle=True,
                              num_parts=kv.num_workers, part_index=kv.rank)
    test = kt.io.NDArrayIter(x[split:], y[split:], batch_size=args.batch_size)
    mod = kt.mod.Module(network([int(h) for h in args.hidden.split(",")], args.dropout, 3))
    mod.fit(train, eval_data=test, kvstore=kv, optimizer="sgd",
            optimizer_params={"learning_rate": args.lr, "momentum": 0.9},
            initializer=kt.init.Xavier(magnitude=2), num_epoch=args.num_epochs,
            batch_end_callback=kt.callback.Speedometer(args.batch_size, 100))
    print("Test accuracy=%.4f" % dict(mod.score(test, "acc"))["accuracy"])


if __name__ == "__main__":
    main()
