"""Module.fit fed by a Python DataIter subclass, as MXNet scripts write
their own iterators (image-classification's SyntheticDataIter, readers of
their own formats), against `import mxnet as mx` (kvtrain's MXNet face).

    python3 mxnet_python_iter.py --kv-store local --out params.npz
    launch.py -n 2 -s 1 python3 mxnet_python_iter.py --kv-store dist_sync

Each worker's iterator yields its own examples of one synthetic problem
(three classes a fixed linear map of ten features tells apart). Prints each
epoch's accuracy lines, the number of reset() calls and batches seen, and
saves the final parameters (worker rank R: --out with .R before .npz).
"""

import argparse
import logging

import numpy as np

import mxnet as mx

ap = argparse.ArgumentParser()
ap.add_argument("--kv-store", default="local")
ap.add_argument("--batches", type=int, default=30)
ap.add_argument("--last-worker-batches", type=int, default=0,
                help="the last worker's batches per epoch (0: --batches)")
ap.add_argument("--num-epochs", type=int, default=3)
ap.add_argument("--batch-size", type=int, default=20)
ap.add_argument("--out", default="")
args = ap.parse_args()
logging.basicConfig(level=logging.INFO)

CLASSES = np.random.RandomState(42).randn(10, 3)


class Synthetic(mx.io.DataIter):
    """`batches` batches of examples drawn with `seed`, labelled by CLASSES."""

    def __init__(self, batches, batch_size, seed):
        super().__init__(batch_size)
        self.x = np.random.RandomState(seed).randn(batches * batch_size, 10).astype(np.float32)
        self.y = np.argmax(self.x @ CLASSES, axis=1).astype(np.float32)
        self.batches, self.cur, self.resets = batches, 0, 0
        self.provide_data = [mx.io.DataDesc("data", (batch_size, 10))]
        self.provide_label = [mx.io.DataDesc("softmax_label", (batch_size,))]

    def reset(self):
        self.cur = 0
        self.resets += 1

    def next(self):
        if self.cur >= self.batches:
            raise StopIteration
        rows = slice(self.cur * self.batch_size, (self.cur + 1) * self.batch_size)
        self.cur += 1
        return mx.io.DataBatch([mx.nd.array(self.x[rows])], [mx.nd.array(self.y[rows])], pad=0)


kv = mx.kv.create(args.kv_store)
last = kv.rank == kv.num_workers - 1 and args.last_worker_batches > 0
train = Synthetic(args.last_worker_batches if last else args.batches, args.batch_size,
                  seed=1 + kv.rank)
val = Synthetic(5, args.batch_size, seed=100)
net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc"),
                           name="softmax")
mod = mx.mod.Module(net)
seen = []
mod.fit(train, eval_data=val, num_epoch=args.num_epochs, kvstore=kv,
        optimizer_params={"learning_rate": 0.5}, initializer=mx.init.Xavier(),
        batch_end_callback=lambda p: seen.append((p.epoch, p.nbatch)))
print("resets %d batches %d accuracy %.4f" % (train.resets, len(seen),
                                              mod.score(val, "acc")[0][1]))
if args.out:
    arg, _ = mod.get_params()
    out = args.out if args.kv_store == "local" else args.out.replace(".npz",
                                                                     ".%d.npz" % kv.rank)
    np.savez(out, **{k: v.asnumpy() for k, v in arg.items()})
