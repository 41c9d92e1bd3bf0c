"""mx.random: seeding and random NDArrays (numpy's generator)."""

import numpy as np

from .ndarray import NDArray, _dtype, _shape


def seed(seed_state, ctx="all"):
    """Seeds the generator behind mx.random's functions (numpy's global
    one, as MXNet scripts that mix mx.random and numpy.random expect)."""
    np.random.seed(int(seed_state))


def uniform(low=0.0, high=1.0, shape=(1,), dtype=None, ctx=None, **kwargs):
    return NDArray(np.random.uniform(low, high, _shape(shape)).astype(_dtype(dtype)), ctx)


def normal(loc=0.0, scale=1.0, shape=(1,), dtype=None, ctx=None, **kwargs):
    return NDArray(np.random.normal(loc, scale, _shape(shape)).astype(_dtype(dtype)), ctx)


def randint(low, high, shape=(1,), dtype=None, ctx=None, **kwargs):
    return NDArray(np.random.randint(low, high, _shape(shape)).astype(_dtype(dtype, np.int32)),
                   ctx)


def shuffle(data, **kwargs):
    return NDArray(np.random.permutation(data._data), data.context)
