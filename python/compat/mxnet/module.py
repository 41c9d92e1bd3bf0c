"""mx.mod.Module: MXNet's Module over kvtrain's (the C++ trainer's loop:
forward, backward, and each parameter's push and pull as soon as backward
makes its gradient; or the same step by step: forward, backward, update).
fit takes MXNet's arguments; one it cannot honour raises NotInKvtrain
naming it, never passes silently."""

import logging
import os

import numpy as np

import kvtrain as _kt

from . import initializer as _init
from . import io as _io
from . import kvstore as _kv
from . import metric as _metric
from . import optimizer as _opt
from .base import NotInKvtrain
from .context import Context, cpu
from .ndarray import NDArray


def _as_list(x):
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _kt_context(c):
    if isinstance(c, Context):
        return _kt.Context(c.device_type, c.device_id)
    return c


def _np_params(params):
    if params is None:
        return None
    return {k: (v.asnumpy() if isinstance(v, NDArray) else np.asarray(v)).astype(np.float32)
            for k, v in params.items()}


def _nd_params(params):
    return {k: NDArray(v) for k, v in params.items()}


def _data(it, what):
    """(kvtrain iterator, epoch size or 0) of an mx.io iterator."""
    if it is None:
        return None, 0
    if isinstance(it, _io.ResizeIter):
        inner = it.data_iter
        return (inner._inner if hasattr(inner, "_inner") else _kt.io.as_iter(inner, what)), it.size
    if isinstance(it, _io._Wrapped):
        return it._inner, 0
    # kvtrain's iterators as they are; a Python DataIter subclass through
    # kvtrain.io.PythonIter (the trainer calls its next() for each batch).
    return _kt.io.as_iter(it, what), 0


def _store(kvstore):
    if isinstance(kvstore, _kv.KVStore):
        return kvstore.handle
    if isinstance(kvstore, str):
        return _kv.create(kvstore).handle
    return kvstore


class Module(_kt.mod.Module):
    def __init__(self, symbol, data_names=("data",), label_names=("softmax_label",),
                 logger=logging, context=None, work_load_list=None, fixed_param_names=None,
                 state_names=None, group2ctxs=None, compression_params=None):
        if state_names or group2ctxs:
            raise NotInKvtrain("Module state_names/group2ctxs",
                               "kvtrain's model parallelism is docs/training.md's")
        if fixed_param_names:
            raise NotInKvtrain("Module fixed_param_names (frozen parameters)",
                               "train every parameter, or a smaller symbol")
        if label_names is None or not _as_list(label_names):
            raise NotInKvtrain("a Module without a label", "give the symbol a loss output")
        contexts = [_kt_context(c) for c in (_as_list(context) or [cpu()])]
        super().__init__(symbol, data_names, label_names, logger, contexts, work_load_list)
        self._compression = compression_params
        self._loaded = None  # (arg, aux) of MXNet's files, from Module.load
        self.logger = logger

    @staticmethod
    def load(prefix, epoch, load_optimizer_states=False, **kwargs):
        """A Module of a checkpoint: MXNet's files (prefix-symbol.json), whose
        parameters fit and init_params then start from, or kvtrain's, which
        resume with their optimizer states when load_optimizer_states."""
        from . import model
        if os.path.exists("%s-symbol.json" % prefix):
            if load_optimizer_states:
                raise NotInKvtrain("load_optimizer_states of MXNet's .states files",
                                   "resume from kvtrain's own checkpoint files")
            sym, arg, aux = model.load_checkpoint(prefix, epoch)
            mod = Module(sym, **kwargs)
            mod._loaded = (arg, aux)
            return mod
        mod = Module(_kt.sym.load(_kt._lib.symbol_path(prefix)), **kwargs)
        mod._handle.preload_checkpoint(prefix, int(epoch), bool(load_optimizer_states))
        mod._preloaded = True
        return mod

    def bind(self, data_shapes, label_shapes=None, for_training=True, inputs_need_grad=False,
             force_rebind=False, shared_module=None, grad_req="write"):
        if inputs_need_grad or shared_module is not None or grad_req != "write":
            raise NotInKvtrain("bind with inputs_need_grad/shared_module/grad_req",
                               "kvtrain binds for training with written gradients")
        super().bind(data_shapes, label_shapes, for_training, False, force_rebind)

    def init_params(self, initializer=None, arg_params=None, aux_params=None,
                    allow_missing=False, force_init=False, allow_extra=False):
        if arg_params is None and self._loaded is not None:
            arg_params, aux_params = self._loaded
        super().init_params(initializer or _init.Uniform(0.01), _np_params(arg_params),
                            _np_params(aux_params), allow_missing, force_init, allow_extra)

    def init_optimizer(self, kvstore="local", optimizer="sgd",
                       optimizer_params=(("learning_rate", 0.01),), force_init=False):
        if self.optimizer_initialized and not force_init:
            return
        self._kv = _store(kvstore)
        if self._compression:
            self._kv.set_gradient_compression(dict(self._compression))
        params = dict(optimizer_params or {})
        if isinstance(optimizer, str):
            # As MXNet's Module: the parameters' names, so biases and
            # BatchNorm's betas take no weight decay.
            named = set(self._data_names) | set(self._label_names)
            params.setdefault("param_idx2name", dict(enumerate(
                n for n in self._symbol.list_arguments() if n not in named)))
            params.setdefault("sym", self._symbol)
        self._optimizer = self._with_variable_mults(_opt.to_kvtrain(
            optimizer if isinstance(optimizer, _opt.Optimizer)
            else _opt.create(optimizer, **params)))
        self.optimizer_initialized = True

    def fit(self, train_data, eval_data=None, eval_metric="acc", epoch_end_callback=None,
            batch_end_callback=None, kvstore="local", optimizer="sgd",
            optimizer_params=(("learning_rate", 0.01),), eval_end_callback=None,
            eval_batch_end_callback=None, initializer=None, arg_params=None,
            aux_params=None, allow_missing=False, force_rebind=False, force_init=False,
            begin_epoch=0, num_epoch=None, validation_metric=None, monitor=None,
            sparse_row_id_fn=None):
        if monitor is not None:
            raise NotInKvtrain("fit(monitor=...)", "see mx.mon.Monitor")
        if sparse_row_id_fn is not None:
            raise NotInKvtrain("fit(sparse_row_id_fn)", "row-sparse parameters are kvtrain "
                               "tables (docs/sparse.md)")
        specs = _metric.trainer_specs(eval_metric)
        if validation_metric is not None and _metric.trainer_specs(validation_metric) != specs:
            raise NotInKvtrain("a validation_metric other than eval_metric",
                               "fit evaluates with eval_metric")
        train, epoch_size = _data(train_data, "training iterator")
        val, _ = _data(eval_data, "evaluation iterator")
        self.init_optimizer(kvstore, optimizer, optimizer_params)
        super().fit(train, eval_data=val, eval_metric=specs,
                    epoch_end_callback=epoch_end_callback,
                    batch_end_callback=batch_end_callback, kvstore=self._kv,
                    eval_end_callback=eval_end_callback,
                    eval_batch_end_callback=eval_batch_end_callback,
                    optimizer=self._optimizer, initializer=initializer or _init.Uniform(0.01),
                    arg_params=arg_params, aux_params=aux_params,
                    allow_missing=allow_missing, force_rebind=force_rebind,
                    force_init=force_init, begin_epoch=begin_epoch, num_epoch=num_epoch,
                    epoch_size=epoch_size)

    def score(self, eval_data, eval_metric, num_batch=None, batch_end_callback=None,
              score_end_callback=None, reset=True, epoch=0, sparse_row_id_fn=None):
        if num_batch is not None or batch_end_callback or score_end_callback:
            raise NotInKvtrain("score(num_batch/batch_end_callback/score_end_callback)",
                               "score runs the whole iterator")
        it, _ = _data(eval_data, "evaluation iterator")
        return super().score(it, _metric.trainer_specs(eval_metric))

    def predict(self, eval_data, num_batch=None, merge_batches=True, reset=True,
                always_output_list=False, sparse_row_id_fn=None):
        if num_batch is not None or not merge_batches:
            raise NotInKvtrain("predict(num_batch/merge_batches=False)",
                               "predict returns every example's output, merged")
        it, _ = _data(eval_data, "prediction iterator")
        out = NDArray(super().predict(it))
        return [out] if always_output_list else out

    def get_params(self):
        arg, aux = super().get_params()
        return _nd_params(arg), _nd_params(aux)

    def set_params(self, arg_params, aux_params=None, allow_missing=False, force_init=True,
                   allow_extra=False):
        super().set_params(_np_params(arg_params), _np_params(aux_params or {}),
                           allow_missing, force_init, allow_extra)

    # The step-by-step API (kvtrain.mod.Module's: one step of fit per
    # forward/backward/update, each waiting for its work).

    def forward(self, data_batch, is_train=None):
        super().forward(data_batch, is_train)

    def backward(self, out_grads=None):
        if out_grads is not None:
            raise NotInKvtrain("Module.backward(out_grads=...)",
                               "the graph ends in its loss, whose gradient backward takes")
        super().backward()

    def get_outputs(self, merge_multi_context=True):
        if not merge_multi_context:
            raise NotInKvtrain("get_outputs(merge_multi_context=False)",
                               "outputs come merged over the devices")
        return [NDArray(o) for o in super().get_outputs()]

    def update_metric(self, eval_metric, labels, pre_sliced=False):
        if pre_sliced:
            raise NotInKvtrain("update_metric(pre_sliced=True)", "pass the whole batch's labels")
        eval_metric.update(labels, self.get_outputs())

    def install_monitor(self, mon):
        raise NotInKvtrain("Module.install_monitor", "see mx.mon.Monitor")

    def save_params(self, fname):
        raise NotInKvtrain("Module.save_params (MXNet's .params format)",
                           "use save_checkpoint (kvtrain's files)")

    def load_params(self, fname):
        raise NotInKvtrain("Module.load_params (MXNet's .params format)",
                           "use Module.load or mx.model.load_checkpoint")
