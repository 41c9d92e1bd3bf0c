"""An MXNet training loop written step by step, the way MXNet's Module
tutorial and many scripts drive a Module (bind, init_params,
init_optimizer, then forward / update_metric / backward / update per
batch), against `import mxnet as mx` (kvtrain's MXNet face).

    python3 mxnet_module_steps.py --kv-store local --out params.npz
    launch.py -n 2 -s 2 python3 mxnet_module_steps.py --kv-store dist_sync

Prints each epoch's training accuracy and the validation accuracy, and
saves the final parameters (worker rank R: --out with .R before .npz).
"""

import argparse
import logging

import numpy as np

import mxnet as mx

ap = argparse.ArgumentParser()
ap.add_argument("--kv-store", default="local")
ap.add_argument("--num-examples", type=int, default=6000)
ap.add_argument("--num-epochs", type=int, default=2)
ap.add_argument("--batch-size", type=int, default=100)
ap.add_argument("--out", default="")
args = ap.parse_args()
logging.basicConfig(level=logging.INFO)

kv = mx.kv.create(args.kv_store)
mnist = mx.test_utils.get_mnist()
n = args.num_examples
# Each worker its own part of the examples.
part = slice(kv.rank * n // kv.num_workers, (kv.rank + 1) * n // kv.num_workers)
train_iter = mx.io.NDArrayIter(mnist["train_data"][:n][part].reshape(-1, 784),
                               mnist["train_label"][:n][part], args.batch_size)
val_iter = mx.io.NDArrayIter(mnist["test_data"][:2000].reshape(-1, 784),
                             mnist["test_label"][:2000], args.batch_size)

data = mx.sym.var("data")
fc1 = mx.sym.FullyConnected(data, name="fc1", num_hidden=128)
act1 = mx.sym.Activation(fc1, name="relu1", act_type="relu")
fc2 = mx.sym.FullyConnected(act1, name="fc2", num_hidden=10)
net = mx.sym.SoftmaxOutput(fc2, name="softmax")

mod = mx.mod.Module(symbol=net, context=mx.cpu(), data_names=["data"],
                    label_names=["softmax_label"])
mod.bind(data_shapes=train_iter.provide_data, label_shapes=train_iter.provide_label)
mx.random.seed(7)
mod.init_params(initializer=mx.init.Xavier(magnitude=2.0))
mod.init_optimizer(kvstore=kv, optimizer="sgd",
                   optimizer_params=(("learning_rate", 0.1), ("momentum", 0.9)))
metric = mx.metric.create("acc")
for epoch in range(args.num_epochs):
    train_iter.reset()
    metric.reset()
    for batch in train_iter:
        mod.forward(batch, is_train=True)
        mod.update_metric(metric, batch.label)
        mod.backward()
        mod.update()
    print("rank %d: Epoch %d, Training %s" % (kv.rank, epoch, metric.get()), flush=True)
score = mod.score(val_iter, ["acc"])
print("rank %d: validation accuracy %.4f" % (kv.rank, dict(score)["accuracy"]), flush=True)
if args.out:
    arg, _ = mod.get_params()
    out = args.out if kv.num_workers == 1 else args.out.replace(".npz", ".%d.npz" % kv.rank)
    np.savez(out, **{k: v.asnumpy() for k, v in arg.items()})
