"""kvtrain.torch: kvtrain's stores and parameter servers for PyTorch models.

Three lines turn a PyTorch training script into a kvtrain job (run it with
tracker/launch.py; see docs/python.md):

    import kvtrain.torch as kvt
    opt = kvt.DistributedOptimizer(model.named_parameters(), kvstore='dist_sync',
                                   optimizer='sgd', optimizer_params={'learning_rate': 0.1})
    kvt.broadcast_parameters(model.state_dict())    # buffers too (weights already are)

The optimizer runs where the store runs it (on the servers for dist_sync and
dist_async): each gradient leaves as soon as backward has produced it
(a hook on its accumulation), first layers first, and the updated weights
come back into the parameters in place, so communication overlaps backward;
step() waits only for what is still missing. Parameters and gradients go
through without copies (CPU float32 contiguous tensors share their memory
with the store); anything else is an error naming the parameter.
"""

import numpy as np
import torch as _torch

from . import _lib
from . import kvstore as _kv
from . import optimizer as _opt

_state = {"kv": None, "broadcasts": 0, "optimizers": 0}


def init(kvstore="dist_sync"):
    """Joins the job with a store of this type (once per process; later calls
    return the same store). In a server or scheduler process of a job this
    serves until the job ends and exits, as kvtrain.kv.create does."""
    kv = _state["kv"]
    if kv is None:
        kv = _kv.create(kvstore)
        _state["kv"] = kv
    elif isinstance(kvstore, str) and kv.type != kvstore:
        raise ValueError("kvtrain.torch already uses a %s store; asked for %s" % (kv.type, kvstore))
    return kv


def _store():
    if _state["kv"] is None:
        raise RuntimeError("kvtrain.torch: call kvtrain.torch.init(kvstore) or create a "
                           "DistributedOptimizer first")
    return _state["kv"]


def rank():
    """This worker's rank."""
    return _store().rank


def num_workers():
    return _store().num_workers


def _view(name, t, what="parameter"):
    """A numpy view sharing the tensor's memory, or a clear error."""
    if t.device.type != "cpu":
        seen = (" (kvtrain sees no GPU in this process)"
                if t.device.type == "cuda" and _lib.num_gpus() == 0 else "")
        raise TypeError("%s %s is on %s: kvtrain.torch takes CPU tensors%s; move the model "
                        "to the CPU" % (what, name, t.device, seen))
    if t.dtype != _torch.float32:
        raise TypeError("%s %s is %s: kvtrain.torch takes float32 tensors (model.float())"
                        % (what, name, str(t.dtype).replace("torch.", "")))
    if not t.is_contiguous():
        raise ValueError("%s %s is not contiguous: make it so (.contiguous()) before "
                         "handing it to kvtrain" % (what, name))
    return t.detach().numpy()


class DistributedOptimizer(object):
    """Trains `named_parameters` through a kvtrain store.

    kvstore: 'dist_sync', 'dist_async', 'dist_allreduce', 'dist_device_sync',
    'local' or 'device'. optimizer / optimizer_params: as
    kvtrain.optimizer.create (sgd, nag, adam, adagrad); rescale_grad defaults
    to 1 / workers for the stores that sum workers' gradients (so a loss
    averaged over each worker's batch trains as one averaged over the global
    batch) and to 1 otherwise. Rank 0's initial parameters become every
    worker's.

    Use it as a torch.optim optimizer: zero_grad(), loss.backward(), step().
    """

    def __init__(self, named_parameters, kvstore="dist_sync", optimizer="sgd",
                 optimizer_params=None):
        kv = init(kvstore)
        self._kv = kv
        named = list(named_parameters)
        if not named or not all(isinstance(n, tuple) and len(n) == 2 for n in named):
            raise TypeError("DistributedOptimizer: expected model.named_parameters() "
                            "((name, parameter) pairs)")
        names = [n for n, _ in named]
        if len(set(names)) != len(names):
            raise ValueError("DistributedOptimizer: parameter names repeat: %s" % names)
        self._names = names
        # The store's keys: the parameters' names (a second optimizer in the
        # same process, made in the same order on every worker, gets its own).
        n = _state["optimizers"]
        _state["optimizers"] += 1
        self._keys = names if n == 0 else ["optimizer%d/%s" % (n, k) for k in names]
        self._params = [p for _, p in named]
        self._weights = [_view(n, p.data) for n, p in named]
        params = dict(optimizer_params or {})
        if "rescale_grad" not in params:
            params["rescale_grad"] = 1.0 / kv.num_workers if kv._handle.sums_workers else 1.0
        self.optimizer = _opt.create(optimizer, **params)
        kv.set_optimizer(self.optimizer)
        kv.init(self._keys, self._weights)
        kv.pull(self._keys, out=self._weights)      # rank 0's values everywhere
        self._pending = {}
        self._accumulators = []  # kept alive: their hooks start the transfers
        for i, p in enumerate(self._params):
            if not p.requires_grad:
                continue
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._hook(i))
            self._accumulators.append(acc)

    @property
    def rank(self):
        return self._kv.rank

    @property
    def num_workers(self):
        return self._kv.num_workers

    def _hook(self, i):
        def hook(*_):
            if i in self._pending:
                raise RuntimeError("parameter %s got a second gradient before step(): "
                                   "call step() after every backward" % self._names[i])
            self._pending[i] = self._start(i)
        return hook

    def _start(self, i):
        p = self._params[i]
        if p.grad is None:
            grad = np.zeros_like(self._weights[i])  # unused this step: every worker pushes
        else:
            grad = _view(self._names[i], p.grad, "the gradient of")
        # The weights are written in place once every worker's gradient is
        # in; backward no longer reads them (their gradient is complete).
        h = self._kv._handle.pushpull_async([self._keys[i]], [grad], [self._weights[i]], -i)
        return h, grad

    def step(self, closure=None):
        """Waits for every parameter's updated weights (starting the
        transfers of parameters whose gradients were not hooked)."""
        loss = closure() if closure is not None else None
        for i in range(len(self._params)):
            if i not in self._pending:
                self._pending[i] = self._start(i)
        pending, self._pending = self._pending, {}
        first = None
        for i in sorted(pending):
            try:
                self._kv._handle.wait(pending[i][0])
            except Exception as e:  # noqa: BLE001 (the first error is raised)
                first = first or e
        if first is not None:
            raise first
        return loss

    def synchronize(self):
        """Every worker's parameters become what the store holds once every
        worker has called it: a barrier, then a pull. For dist_async this is
        the model after all workers' updates (a worker's own copy misses the
        updates others pushed after its last step); for the synchronous
        stores the values are the same as before."""
        if self._pending:
            raise RuntimeError("synchronize: call step() first (gradients of %s are in flight)"
                               % ", ".join(self._names[i] for i in sorted(self._pending)))
        self._kv.barrier()
        self._kv.pull(self._keys, out=self._weights)

    def zero_grad(self, set_to_none=False):
        for p in self._params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()

    def save_states(self, fname):
        """The optimizer's states (momentum, ...; from the servers for dist
        stores) to `fname`; call on one worker."""
        self._kv.save_optimizer_states(fname)

    def load_states(self, fname):
        """Restores states saved by save_states: every worker calls it; rank 0
        loads them (onto the servers) and the others wait for it."""
        if self._kv.rank == 0:
            self._kv.load_optimizer_states(fname)
        self._kv.barrier()


def broadcast_parameters(params, root_rank=0):
    """Rank 0's values of `params` (a state_dict or named_parameters()) in
    every worker, written in place. Float32 contiguous tensors go through
    without copies; other dtypes (e.g. BatchNorm's num_batches_tracked)
    through float32 copies."""
    if root_rank != 0:
        raise ValueError("broadcast_parameters: root_rank=%r: rank 0's values are the ones "
                         "a kvtrain store starts from (root_rank=0)" % (root_rank,))
    kv = _store()
    items = list(params.items()) if hasattr(params, "items") else list(params)
    _state["broadcasts"] += 1
    keys, arrays, copies = [], [], []
    for name, t in items:
        key = "broadcast/%d/%s" % (_state["broadcasts"], name)
        t = t.data if hasattr(t, "data") and isinstance(t, _torch.nn.Parameter) else t
        if t.device.type != "cpu":
            _view(name, t, "tensor")  # raises, naming it
        if t.dtype == _torch.float32 and t.is_contiguous():
            arr = t.detach().numpy()
        else:
            arr = t.detach().float().contiguous().numpy().copy()
            copies.append((t, arr))
        keys.append(key)
        arrays.append(arr.reshape(-1) if arr.ndim == 0 else arr)
    if not keys:
        return
    kv.init(keys, arrays)
    kv.pull(keys, out=arrays)
    for t, arr in copies:
        with _torch.no_grad():
            t.copy_(_torch.from_numpy(arr.reshape(t.shape)).to(t.dtype))
