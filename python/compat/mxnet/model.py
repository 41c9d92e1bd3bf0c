"""mx.model: checkpoints (kvtrain's files: prefix-symbol.txt and
prefix-NNNN.params) and BatchEndParam."""

import kvtrain as _kt

from .base import NotInKvtrain
from .module import _nd_params, _np_params

BatchEndParam = _kt.callback.BatchEndParam


def save_checkpoint(prefix, epoch, symbol, arg_params, aux_params, remove_amp_cast=True):
    _kt.model.save_checkpoint(prefix, epoch, symbol, _np_params(arg_params),
                              _np_params(aux_params or {}))


def load_checkpoint(prefix, epoch):
    """(symbol, arg_params, aux_params), the parameters as NDArrays."""
    sym, arg, aux = _kt.model.load_checkpoint(prefix, epoch)
    return sym, _nd_params(arg), _nd_params(aux)


def load_params(prefix, epoch):
    arg, aux = _kt.model.load_params(_kt._lib.params_path(prefix, int(epoch)))
    return _nd_params(arg), _nd_params(aux)


class FeedForward(object):
    def __init__(self, *args, **kwargs):
        raise NotInKvtrain("mx.model.FeedForward", "use mx.mod.Module (fit, predict, score)")

    @staticmethod
    def create(*args, **kwargs):
        raise NotInKvtrain("mx.model.FeedForward.create", "use mx.mod.Module.fit")

    @staticmethod
    def load(*args, **kwargs):
        raise NotInKvtrain("mx.model.FeedForward.load", "use mx.mod.Module.load")
