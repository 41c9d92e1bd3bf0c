"""mx.sym / mx.symbol: MXNet's symbol API over kvtrain's graphs.

Every operator kvtrain's core registers is here under MXNet's name and
arguments (`data=`, `num_hidden=`, `kernel=(5, 5)`, ...). MXNet's attributes
that tune cuDNN and leave the result alone (`workspace`, `cudnn_tune`,
`cudnn_off`) are accepted on every operator; any other attribute an
operator does not have is an error naming it. An MXNet operator kvtrain does
not have raises NotInKvtrain naming it.
"""

import sys

import kvtrain as _kt
from kvtrain import _lib
from kvtrain.symbol import Group, Symbol, load, load_json  # noqa: F401

from .base import NotInKvtrain

# Attributes that only tune how cuDNN computes.
_HARMLESS = ("workspace", "cudnn_tune", "cudnn_off")

# MXNet operators kvtrain's core does not have (a selection of the common).
_NOT_HERE = {
    "LeakyReLU", "softmax", "log_softmax", "SoftmaxActivation", "identity", "BlockGrad",
    "stop_gradient", "Cast", "clip", "LRN", "broadcast_add", "broadcast_sub",
    "broadcast_mul", "broadcast_div", "dot", "batch_dot", "transpose", "SliceChannel",
    "split", "slice_axis", "expand_dims", "Deconvolution", "RNN", "LayerNorm",
    "InstanceNorm", "UpSampling", "SpatialTransformer", "MakeLoss", "L2Normalization",
    "sum", "mean", "exp", "log", "sqrt", "square", "relu", "sigmoid", "tanh", "where",
    "zeros", "ones", "Custom", "take", "pick", "one_hot", "Crop", "Pad", "ROIPooling",
    "MAERegressionOutput", "LogisticRegressionOutput", "SVMOutput", "smooth_l1",
}


def Variable(name, attr=None, shape=None, lr_mult=None, wd_mult=None, dtype=None, init=None,
             stype=None, **kwargs):
    """An input, parameter or label named `name`."""
    if lr_mult not in (None, 1, 1.0) or wd_mult not in (None, 1, 1.0):
        raise NotInKvtrain("Variable %r: lr_mult/wd_mult (per-parameter rates)" % (name,),
                           "every parameter takes the optimizer's rate and wd")
    if dtype not in (None, "float32") and getattr(dtype, "__name__", None) != "float32":
        raise NotInKvtrain("Variable %r: dtype %s" % (name, dtype),
                           "kvtrain's graphs compute in float32")
    if init is not None:
        raise NotInKvtrain("Variable %r: init= (a per-variable initializer)" % (name,),
                           "pass one initializer to Module.fit/init_params")
    if stype not in (None, "default"):
        raise NotInKvtrain("Variable %r: stype %r" % (name, stype),
                           "row-sparse parameters are kvtrain tables (docs/sparse.md)")
    return _kt.sym.Variable(name)


var = Variable


def _wrap(op_type, fn):
    known = {a[0] for a in _lib.describe_op(op_type)["attrs"]}
    drop = [a for a in _HARMLESS if a not in known]

    def op(*args, **kwargs):
        for a in drop:
            kwargs.pop(a, None)
        return fn(*args, **kwargs)

    op.__name__ = op_type
    op.__doc__ = fn.__doc__
    return op


def _generate():
    module = sys.modules[__name__]
    for op_type in _lib.registered_ops():
        setattr(module, op_type, _wrap(op_type, getattr(_kt.sym, op_type)))


_generate()


def __getattr__(name):
    if name in _NOT_HERE:
        raise NotInKvtrain("mx.sym.%s" % name,
                           "kvtrain's operators are listed in docs/operators.md")
    raise AttributeError("module 'mxnet.symbol' has no attribute %r" % (name,))
