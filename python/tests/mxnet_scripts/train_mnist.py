"""MNIST in the shape of MXNet's example/image-classification/train_mnist.py:
read the idx files into numpy, hand NDArrayIters to common/fit.py. Reads
data/ under the working directory (the four .gz files of MNIST or
Fashion-MNIST), as MXNet's does once it has downloaded them."""
import argparse
import gzip
import logging
import os
import struct

import numpy as np

import mxnet as mx
from common import fit

logging.basicConfig(level=logging.DEBUG)


def read_data(label, image):
    with gzip.open(os.path.join('data', label)) as f:
        struct.unpack(">II", f.read(8))
        labels = np.frombuffer(f.read(), dtype=np.int8)
    with gzip.open(os.path.join('data', image), 'rb') as f:
        _, _, rows, cols = struct.unpack(">IIII", f.read(16))
        images = np.frombuffer(f.read(), dtype=np.uint8).reshape(len(labels), rows, cols)
    return labels, images


def to4d(img):
    return img.reshape(img.shape[0], 1, 28, 28).astype(np.float32) / 255


def get_mnist_iter(args, kv):
    train_lbl, train_img = read_data('train-labels-idx1-ubyte.gz', 'train-images-idx3-ubyte.gz')
    val_lbl, val_img = read_data('t10k-labels-idx1-ubyte.gz', 't10k-images-idx3-ubyte.gz')
    n = args.num_examples
    train = mx.io.NDArrayIter(to4d(train_img[:n]), train_lbl[:n], args.batch_size, shuffle=True)
    val = mx.io.NDArrayIter(to4d(val_img), val_lbl, args.batch_size)
    return train, val


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description="train mnist",
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('--num-classes', type=int, default=10, help='classes')
    parser.add_argument('--num-examples', type=int, default=60000, help='training examples')
    parser.add_argument('--add_stn', action="store_true", default=False,
                        help='add a spatial transformer before lenet')
    parser.add_argument('--image-shape', default='1, 28, 28', help='for resnet')
    fit.add_fit_args(parser)
    parser.set_defaults(network='mlp', gpus=None, batch_size=64, disp_batches=100,
                        num_epochs=20, lr=.05, lr_step_epochs='10')
    args = parser.parse_args()

    from importlib import import_module
    net = import_module('symbols.' + args.network)
    sym = net.get_symbol(**vars(args))
    fit.fit(args, sym, get_mnist_iter)
