"""kvtrain.mod.Module: trains a symbol (MXNet's mx.mod.Module), with the C++
trainer's loop: forward, backward, and each parameter's push and pull
issued as soon as backward produces its gradient.

    mod = kvtrain.mod.Module(net, context=[kvtrain.cpu()])
    mod.fit(train, eval_data=test, kvstore='dist_sync', optimizer='sgd',
            optimizer_params={'learning_rate': 0.1, 'momentum': 0.9},
            initializer=kvtrain.init.Xavier(), num_epoch=10,
            batch_end_callback=kvtrain.callback.Speedometer(100, 100),
            epoch_end_callback=kvtrain.callback.do_checkpoint('out/mlp'))
"""

import logging

import numpy as _np

from . import _lib
from . import Context, cpu
from . import callback as _cb
from . import initializer as _init
from . import io as _io
from . import kvstore as _kv
from . import optimizer as _opt
from . import symbol as _sym


def _as_list(x):
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _shape_of(shapes, name, what):
    shapes = _as_list(shapes)
    if len(shapes) != 1:
        raise ValueError("bind: expected one %s shape, got %r" % (what, shapes))
    s = shapes[0]
    if hasattr(s, "shape"):  # a DataDesc-like object
        s = (getattr(s, "name", name), s.shape)
    if isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], str):
        return tuple(int(d) for d in s[1])
    return tuple(int(d) for d in s)


def _to_numpy(a):
    return a.asnumpy() if hasattr(a, "asnumpy") else _np.asarray(a)


def _metric_names(eval_metric):
    names = []
    for m in _as_list(eval_metric):
        if not isinstance(m, str):
            raise TypeError("eval_metric: metrics are named by strings ('acc', 'ce', "
                            "'top_k_accuracy:5'), got %s" % type(m).__name__)
        names.append(m)
    return names or ["accuracy"]


class Module(object):
    def __init__(self, symbol, data_names=("data",), label_names=("softmax_label",),
                 logger=logging, context=None, work_load_list=None, fixed_param_names=None):
        if not isinstance(symbol, _sym.Symbol):
            raise TypeError("Module: expected a kvtrain.sym.Symbol, got %s" % type(symbol).__name__)
        if fixed_param_names:
            raise ValueError("Module: fixed_param_names is not supported")
        context = _as_list(context) or [cpu()]
        for c in context:
            if not isinstance(c, Context):
                raise TypeError("Module: context must be kvtrain.cpu()/kvtrain.gpu(i), got %r" % (c,))
        data_names, label_names = _as_list(data_names), _as_list(label_names)
        if len(data_names) != 1 or len(label_names) != 1:
            raise ValueError("Module: one data and one label input are supported")
        self._symbol = symbol
        self._context = context
        self._handle = _lib.Module.create(symbol._handle, context,
                                          [float(w) for w in (work_load_list or [])],
                                          data_names[0], label_names[0])
        self._data_names, self._label_names = data_names, label_names
        self.binded = self.params_initialized = self.optimizer_initialized = False
        self._preloaded = False
        self._kv = None
        self._optimizer = None
        self._batch_size = 0
        self._label_shape = None
        self._for_training = True
        self._steps_ready = False  # the store set up for forward/backward/update

    @staticmethod
    def load(prefix, epoch, load_optimizer_states=False, **kwargs):
        """A Module of prefix's checkpoint of `epoch`; fit(begin_epoch=epoch)
        then resumes it (with the optimizer states when load_optimizer_states,
        checked to be the ones saved with the params)."""
        mod = Module(_sym.load(_lib.symbol_path(prefix)), **kwargs)
        mod._handle.preload_checkpoint(prefix, int(epoch), bool(load_optimizer_states))
        mod._preloaded = True
        return mod

    @property
    def symbol(self):
        return self._symbol

    @property
    def data_names(self):
        return list(self._data_names)

    @property
    def label_names(self):
        return list(self._label_names)

    def bind(self, data_shapes, label_shapes=None, for_training=True, inputs_need_grad=False,
             force_rebind=False, shared_module=None, grad_req="write"):
        """Binds for global batches of data_shapes, e.g. [('data', (100, 784))]."""
        if self.binded and not force_rebind:
            return
        dshape = _shape_of(data_shapes, self._data_names[0], "data")
        lshape = (_shape_of(label_shapes, self._label_names[0], "label") if label_shapes
                  else (dshape[0],))
        self._handle.bind(dshape, lshape)
        self._data_shape = dshape
        self._batch_size = dshape[0]
        self._label_shape = lshape
        self._for_training = bool(for_training)
        self.binded = True

    def init_params(self, initializer=None, arg_params=None, aux_params=None,
                    allow_missing=False, force_init=False, allow_extra=False):
        """From arg_params/aux_params (numpy dicts) when given, else from a
        checkpoint loaded by Module.load, else by the initializer
        (default kvtrain.init.Uniform(0.01))."""
        if self.params_initialized and not force_init:
            return
        if not self.binded:
            raise RuntimeError("init_params before bind")
        initializer = initializer or _init.Uniform(0.01)
        if not isinstance(initializer, _init.Initializer):
            raise TypeError("initializer: expected a kvtrain.init initializer, got %r" % (initializer,))
        if isinstance(initializer, _init.Mixed) and arg_params is None:
            # Each parameter by its own initializer, handed over as arrays.
            arg_params, aux_params = self._mixed_arrays(initializer, aux_params)
            initializer = _init.Uniform(0.01)
        self._handle.init_params(initializer._text, initializer.seed, arg_params, aux_params,
                                 self._preloaded and arg_params is None)
        self.params_initialized = True

    def _mixed_arrays(self, mixed, aux_params):
        named = set(self._data_names) | set(self._label_names)
        arg_shapes, _, aux_shapes = self._symbol.infer_shape(
            **{self._data_names[0]: self._data_shape, self._label_names[0]: self._label_shape})
        args = [(n, s) for n, s in zip(self._symbol.list_arguments(), arg_shapes)
                if n not in named]
        aux = list(zip(self._symbol.list_auxiliary_states(), aux_shapes))
        return mixed.arrays(args), (aux_params if aux_params is not None else mixed.arrays(aux))

    def init_optimizer(self, kvstore="local", optimizer="sgd",
                       optimizer_params=(("learning_rate", 0.01),), force_init=False):
        """The store and optimizer fit trains with. rescale_grad defaults to
        1 / (batch x workers summed per update)."""
        if self.optimizer_initialized and not force_init:
            return
        self._kv = kvstore if isinstance(kvstore, _kv.KVStore) else _kv.create(kvstore)
        self._optimizer = self._with_variable_mults(
            optimizer if isinstance(optimizer, _opt.Optimizer)
            else _opt.create(optimizer, **dict(optimizer_params or {})))
        self.optimizer_initialized = True
        self._steps_ready = False

    def _with_variable_mults(self, optimizer):
        """`optimizer` with the graph variables' lr_mult and wd_mult added
        (those the optimizer names itself win)."""
        found = {"lr_mult": {}, "wd_mult": {}}
        for name, attrs in self._symbol.attr_dict().items():
            for key in found:
                if "__%s__" % key in attrs:
                    found[key][name] = float(attrs["__%s__" % key])
        if not (found["lr_mult"] or found["wd_mult"]):
            return optimizer
        params = dict(optimizer.params)
        for key, mults in found.items():
            merged = dict(mults)
            merged.update(params.get(key) or {})
            if merged:
                params[key] = merged
        return _opt.Optimizer(optimizer.name, **params)

    def fit(self, train_data, eval_data=None, eval_metric="acc", epoch_end_callback=None,
            batch_end_callback=None, kvstore="local", optimizer="sgd",
            optimizer_params=(("learning_rate", 0.01),), eval_end_callback=None,
            eval_batch_end_callback=None, initializer=None, arg_params=None,
            aux_params=None, allow_missing=False, force_rebind=False, force_init=False,
            begin_epoch=0, num_epoch=None, validation_metric=None, monitor=None,
            epoch_size=None, disp_batches=0, metrics_file="", update_on_kvstore=None):
        """Trains for epochs [begin_epoch, num_epoch). `epoch_size` batches
        per epoch (default: the data's; the workers of a synchronous store
        all run as many as the largest part has). disp_batches > 0 also
        prints the C++ trainer's speedometer line every that many batches.
        update_on_kvstore: True, the store applies the optimizer (on the
        servers for dist stores); False, each worker does with the summed
        gradients; None, the workers where the servers answer 2bit/1bit
        summed codes exactly as levels (dist_sync, 2 or more workers), the
        store elsewhere."""
        if num_epoch is None:
            raise ValueError("fit: num_epoch is required")
        train_data = _io.as_iter(train_data, "fit: train_data")
        eval_data = _io.as_iter(eval_data, "fit: eval_data")
        self.bind(train_data.provide_data, train_data.provide_label, force_rebind=force_rebind)
        self.init_params(initializer, arg_params, aux_params, allow_missing, force_init)
        self.init_optimizer(kvstore, optimizer, optimizer_params)
        checkpoints = [c for c in _as_list(epoch_end_callback) if isinstance(c, _cb._Checkpoint)]
        others = [c for c in _as_list(epoch_end_callback) if not isinstance(c, _cb._Checkpoint)]
        batch_cbs = _as_list(batch_end_callback)
        model_prefix, period = "", 1
        if len(checkpoints) == 1:
            # The C++ trainer saves: the optimizer's states wherever it runs,
            # and each worker's compression residuals.
            c = checkpoints.pop()
            model_prefix, period = c.prefix, c.period
        opts = {
            "begin_epoch": int(begin_epoch), "num_epoch": int(num_epoch),
            "epoch_size": int(epoch_size or 0), "optimizer": self._optimizer.spec,
            "eval_metric": _metric_names(eval_metric), "disp_batches": int(disp_batches),
            "model_prefix": model_prefix, "checkpoint_period": int(period),
            "metrics_file": metrics_file,
            "update_on_kvstore": None if update_on_kvstore is None else bool(update_on_kvstore),
        }

        def on_batch(epoch, nbatch, values):
            param = _cb.BatchEndParam(epoch, nbatch, _cb.EvalResult(values))
            for cb in batch_cbs:
                cb(param)

        eval_batch_cbs = _as_list(eval_batch_end_callback)
        eval_end_cbs = _as_list(eval_end_callback)

        def on_eval_batch(epoch, nbatch, values):
            param = _cb.BatchEndParam(epoch, nbatch, _cb.EvalResult(values))
            for cb in eval_batch_cbs:
                cb(param)

        def on_eval_end(epoch, values):
            param = _cb.BatchEndParam(epoch, 0, _cb.EvalResult(values))
            for cb in eval_end_cbs:
                cb(param)

        def on_epoch(epoch):
            for c in checkpoints:
                if (epoch + 1) % c.period == 0 and self._kv.rank == 0:
                    self.save_checkpoint(c.prefix, epoch + 1, save_optimizer_states=True)
            if others:
                arg, aux = self.get_params()
                for cb in others:
                    cb(epoch, self._symbol, arg, aux)

        self._handle.fit(train_data._handle, eval_data._handle if eval_data is not None else None,
                         self._kv._handle, opts, on_batch if batch_cbs else None,
                         on_epoch if (checkpoints or others) else None,
                         on_eval_batch if eval_batch_cbs else None,
                         on_eval_end if eval_end_cbs else None)

    # The step-by-step API: forward, backward, update, as one step of fit
    # (the same store traffic), each call waiting for its work.

    def _prepare_steps(self):
        if not self._steps_ready:
            self._handle.prepare_steps(self._kv._handle, self._optimizer.spec, None)
            self._steps_ready = True

    def forward(self, data_batch, is_train=None):
        """Runs one batch (anything with .data = [array] and .label =
        [array] or None, e.g. a DataBatch) through the graph; is_train
        (default: bind's for_training) keeps what backward needs. The batch
        must have the bound batch size. After init_optimizer, the first
        training forward makes the parameters the store's (rank 0's, for
        every worker of a dist store), as fit does."""
        self._need_params("forward")
        is_train = self._for_training if is_train is None else bool(is_train)
        if is_train and self.optimizer_initialized:
            self._prepare_steps()
        data = _as_list(getattr(data_batch, "data", data_batch))
        labels = [l for l in _as_list(getattr(data_batch, "label", None)) if l is not None]
        if len(data) != 1 or len(labels) > 1:
            raise ValueError("forward: one data array and at most one label array, got %d and "
                             "%d" % (len(data), len(labels)))
        x = _np.ascontiguousarray(_to_numpy(data[0]), dtype=_np.float32)
        if labels:
            y = _np.ascontiguousarray(_to_numpy(labels[0]), dtype=_np.float32)
        else:
            y = _np.zeros(self._label_shape, dtype=_np.float32)
        self._handle.forward(x, y, is_train)

    def backward(self, out_grads=None):
        """The gradients of the last training forward's loss."""
        if out_grads is not None:
            raise ValueError("backward: out_grads is not supported (the graph ends in its loss)")
        self._handle.backward()

    def update(self):
        """Pushes every gradient of the last backward to the store and pulls
        the new weights (the optimizer runs on the store, as in fit)."""
        if not self.optimizer_initialized:
            raise RuntimeError("update before init_optimizer")
        self._prepare_steps()
        self._handle.update()

    def get_outputs(self, merge_multi_context=True):
        """[the last forward's first output], a numpy array (batch, ...)."""
        if not merge_multi_context:
            raise ValueError("get_outputs: only merged outputs (merge_multi_context=True)")
        return [self._handle.get_outputs()]

    def update_metric(self, eval_metric, labels, pre_sliced=False):
        """eval_metric.update(labels, the last forward's outputs)."""
        eval_metric.update(_as_list(labels), self.get_outputs())

    def score(self, eval_data, eval_metric="acc", num_batch=None, batch_end_callback=None,
              reset=True, epoch=0):
        """[(metric name, value)] of the model on eval_data (forward only)."""
        self._need_params("score")
        eval_data = _io.as_iter(eval_data, "score: eval_data")
        return self._handle.score(eval_data._handle, _metric_names(eval_metric))

    def predict(self, eval_data, num_batch=None, merge_batches=True, reset=True,
                always_output_list=False):
        """The output for every example of eval_data (padding dropped), as a
        numpy array (examples, ...)."""
        self._need_params("predict")
        eval_data = _io.as_iter(eval_data, "predict: eval_data")
        return self._handle.predict(eval_data._handle)

    def get_params(self):
        """(arg_params, aux_params): numpy copies of the parameters."""
        self._need_params("get_params")
        return self._handle.get_params()

    def set_params(self, arg_params, aux_params=None, allow_missing=False, force_init=True,
                   allow_extra=False):
        self.init_params(None, arg_params, aux_params or {}, allow_missing, force_init=True)

    def save_checkpoint(self, prefix, epoch, save_optimizer_states=False):
        """prefix-symbol.txt, prefix-NNNN.params and, with the optimizer
        states (from the store, after init_optimizer), prefix-NNNN.states."""
        self._need_params("save_checkpoint")
        kv = self._kv._handle if (save_optimizer_states and self._kv is not None) else None
        if save_optimizer_states and kv is None:
            raise RuntimeError("save_checkpoint: optimizer states need init_optimizer (or fit) first")
        self._handle.save_checkpoint(prefix, int(epoch), kv)

    def _need_params(self, what):
        if not (self.binded and self.params_initialized):
            raise RuntimeError("%s before bind and init_params (or fit)" % what)
