"""mx.model: checkpoints in MXNet's files (prefix-symbol.json, MXNet's JSON
graph, and prefix-NNNN.params, MXNet's binary arrays named arg:... and
aux:...), which MXNet reads as well; load_checkpoint also reads the files
kvtrain's trainer writes (prefix-symbol.txt and its own .params)."""

import os

import numpy as np

import kvtrain as _kt

from . import ndarray as _nd
from . import symbol as _sym
from .base import NotInKvtrain
from .ndarray import NDArray

BatchEndParam = _kt.callback.BatchEndParam


def _as_nd(params):
    return {k: v if isinstance(v, NDArray) else NDArray(np.asarray(v))
            for k, v in (params or {}).items()}


def save_checkpoint(prefix, epoch, symbol, arg_params, aux_params, remove_amp_cast=True):
    """Writes prefix-symbol.json and prefix-NNNN.params as MXNet does."""
    if symbol is not None:
        with open("%s-symbol.json" % prefix, "w") as f:
            f.write(_sym.to_mxnet_json(symbol))
    arrays = {"arg:%s" % k: v for k, v in _as_nd(arg_params).items()}
    arrays.update({"aux:%s" % k: v for k, v in _as_nd(aux_params).items()})
    _nd.save("%s-%04d.params" % (prefix, int(epoch)), arrays)


def load_params(prefix, epoch):
    """(arg_params, aux_params) of prefix-NNNN.params, MXNet's or kvtrain's."""
    path = "%s-%04d.params" % (prefix, int(epoch))
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:8] != (0x112).to_bytes(8, "little"):
        arg, aux = _kt.model.load_params(path)
        return _as_nd(arg), _as_nd(aux)
    arg, aux = {}, {}
    for name, value in _nd.load(path).items():
        kind, _, key = name.partition(":")
        if kind == "arg":
            arg[key] = value
        elif kind == "aux":
            aux[key] = value
        else:
            raise ValueError("%s: array %r is neither arg: nor aux:" % (path, name))
    return arg, aux


def load_checkpoint(prefix, epoch):
    """(symbol, arg_params, aux_params), the parameters as NDArrays."""
    json_path = "%s-symbol.json" % prefix
    sym = _sym.load(json_path if os.path.exists(json_path)
                    else _kt._lib.symbol_path(prefix))
    arg, aux = load_params(prefix, epoch)
    return sym, arg, aux


def _iter(X, y, batch_size, shuffle, what):
    """An mx.io iterator of X (an iterator, or numpy/NDArray data with y)."""
    from . import io
    if isinstance(X, (io.DataIter, _kt.io.DataIter)):
        if y is not None:
            raise ValueError("%s: y is given with an iterator, which holds the labels" % what)
        return X
    if y is None:
        y = np.zeros(len(X), np.float32)  # prediction: labels unused
    return io.NDArrayIter(X, y, min(batch_size, len(X)), shuffle=shuffle,
                          last_batch_handle="pad")


class FeedForward(object):
    """MXNet's older model API over mx.mod.Module: the same training loop,
    checkpoints in MXNet's files."""

    def __init__(self, symbol, ctx=None, num_epoch=None, epoch_size=None, optimizer="sgd",
                 initializer=None, numpy_batch_size=128, arg_params=None, aux_params=None,
                 allow_extra_params=False, begin_epoch=0, **kwargs):
        from . import initializer as init
        self.symbol, self.ctx, self.num_epoch = symbol, ctx, num_epoch
        self.epoch_size, self.optimizer = epoch_size, optimizer
        self.initializer = initializer or init.Uniform(0.01)
        self.numpy_batch_size, self.begin_epoch = numpy_batch_size, begin_epoch
        self.arg_params, self.aux_params = arg_params, aux_params
        self.kwargs = dict(kwargs)  # the optimizer's parameters
        self._mod = None

    def _module(self, data):
        from .module import Module
        if self._mod is None:
            self._mod = Module(self.symbol, context=self.ctx)
            self._mod.bind(data.provide_data, data.provide_label)
            self._mod.init_params(self.initializer, self.arg_params, self.aux_params)
        return self._mod

    def fit(self, X, y=None, eval_data=None, eval_metric="acc", epoch_end_callback=None,
            batch_end_callback=None, kvstore="local", logger=None, work_load_list=None,
            monitor=None, eval_end_callback=None, eval_batch_end_callback=None):
        if self.num_epoch is None:
            raise ValueError("FeedForward.fit: num_epoch was not given")
        if work_load_list is not None:
            raise NotInKvtrain("FeedForward.fit(work_load_list=)", "use mx.mod.Module")
        train = _iter(X, y, self.numpy_batch_size, True, "fit")
        if isinstance(eval_data, tuple):
            eval_data = _iter(eval_data[0], eval_data[1], self.numpy_batch_size, False, "fit")
        mod = self._module(train)
        mod.fit(train, eval_data=eval_data, eval_metric=eval_metric,
                epoch_end_callback=epoch_end_callback, batch_end_callback=batch_end_callback,
                kvstore=kvstore, optimizer=self.optimizer, optimizer_params=self.kwargs,
                begin_epoch=self.begin_epoch, num_epoch=self.num_epoch, monitor=monitor,
                eval_end_callback=eval_end_callback,
                eval_batch_end_callback=eval_batch_end_callback)
        self.arg_params, self.aux_params = mod.get_params()

    def predict(self, X, num_batch=None, return_data=False, reset=True):
        if return_data:
            raise NotInKvtrain("FeedForward.predict(return_data=True)",
                               "keep the data beside the predictions")
        data = _iter(X, None, self.numpy_batch_size, False, "predict")
        return self._module(data).predict(data, num_batch=num_batch).asnumpy()

    def score(self, X, eval_metric="acc", num_batch=None, batch_end_callback=None, reset=True):
        data = _iter(X, None, self.numpy_batch_size, False, "score")
        return self._module(data).score(data, eval_metric, num_batch=num_batch,
                                        batch_end_callback=batch_end_callback)[0][1]

    def save(self, prefix, epoch=None):
        save_checkpoint(prefix, self.num_epoch if epoch is None else epoch, self.symbol,
                        self.arg_params, self.aux_params)

    @staticmethod
    def load(prefix, epoch, ctx=None, **kwargs):
        sym, arg, aux = load_checkpoint(prefix, epoch)
        return FeedForward(sym, ctx=ctx, arg_params=arg, aux_params=aux, begin_epoch=epoch,
                           **kwargs)

    @staticmethod
    def create(symbol, X, y=None, ctx=None, num_epoch=None, epoch_size=None, optimizer="sgd",
               initializer=None, eval_data=None, eval_metric="acc", epoch_end_callback=None,
               batch_end_callback=None, kvstore="local", logger=None, work_load_list=None,
               eval_end_callback=None, eval_batch_end_callback=None, **kwargs):
        model = FeedForward(symbol, ctx=ctx, num_epoch=num_epoch, epoch_size=epoch_size,
                            optimizer=optimizer, initializer=initializer, **kwargs)
        model.fit(X, y, eval_data=eval_data, eval_metric=eval_metric,
                  epoch_end_callback=epoch_end_callback, batch_end_callback=batch_end_callback,
                  kvstore=kvstore, logger=logger, work_load_list=work_load_list,
                  eval_end_callback=eval_end_callback,
                  eval_batch_end_callback=eval_batch_end_callback)
        return model
