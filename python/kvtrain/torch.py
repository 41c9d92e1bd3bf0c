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

Embedding tables too large for a worker live in the store instead:
ServerEmbeddingBag (an nn.EmbeddingBag whose rows are pulled per batch and
whose gradient rows are pushed during backward; see its docstring and
examples/python/train_ctr.py).
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
    if kv.resume_step >= 0:
        # A worker started again: its DistributedOptimizer pulled the job's
        # current weights; rank 0's first values would undo that.
        return
    kv.pull(keys, out=arrays)
    for t, arr in copies:
        with _torch.no_grad():
            t.copy_(_torch.from_numpy(arr.reshape(t.shape)).to(t.dtype))


def _unique(ids):
    """torch.unique(ids, sorted=True, return_inverse=True) of a 1-D int64 CPU
    tensor, through numpy (about twice as fast for a batch's ids)."""
    unique, inverse = np.unique(ids.numpy(), return_inverse=True)
    return _torch.from_numpy(unique), _torch.from_numpy(inverse.reshape(-1))


class ServerEmbeddingBag(_torch.nn.Module):
    """torch.nn.EmbeddingBag whose table lives only in a kvtrain store: on
    the servers for dist types (each table's rows spread over all of them),
    in this process for local types. Only the rows a batch names ever reach
    the worker; nothing of the table is a torch Parameter (model.parameters(),
    state_dict() and DistributedOptimizer do not see it).

        emb = kvt.ServerEmbeddingBag('emb', 0, 16, mode='sum', kvstore='dist_sync',
                                     init='normal', scale=0.01)
        out = emb(ids_2d)                     # (batch, bag) -> (batch, 16)
        out = emb(ids_1d, offsets)            # nn.EmbeddingBag's 1-D form
        out = emb(ids_1d, offsets, per_sample_weights=w)   # mode='sum'

    key: the table's key in the store (a str; unique among the store's
    keys). num_embeddings: valid ids are [0, num_embeddings); 0 allows any
    id >= 0 (int64, e.g. hashed or field-shifted ids). embedding_dim: the
    row width. mode: 'sum' or 'mean' (default 'mean', as nn.EmbeddingBag;
    'max' is not supported). kvstore: a kvtrain.kv.KVStore, a store type
    (joined through kvtrain.torch.init) or None for kvtrain.torch's store.
    init, scale, seed, admit_after, expire_after, max_rows: the table's
    kvtrain.sparse.Table (rows start as init(scale), a function of (seed,
    key, id) only, so every worker and process sees the same initial rows).
    include_last_offset: as nn.EmbeddingBag.

    Forward takes the batch's distinct ids (a sorted unique), pulls their rows
    from the store (row_sparse_pull) into a float32 tensor and reduces the
    bags with F.embedding_bag over those rows, so autograd yields the
    gradient of each pulled row. When backward reaches it, a hook pushes
    (distinct ids, gradient rows) to the store at once, overlapping the rest
    of backward, and the store's optimizer updates just those rows (lazily).
    ids: int64 (int32 is widened); anything else is a TypeError naming the
    key, and ids outside the table are the store's error naming the key
    and the id.

    The optimizer: optimizer= (a name or kvtrain.optimizer.Optimizer) and
    optimizer_params give the table its own rule, e.g. adagrad for the
    embeddings while DistributedOptimizer trains the dense part with adam
    (rescale_grad defaults to 1 / workers for the stores that sum workers'
    gradients, as in DistributedOptimizer). Without one, the table follows
    the store's optimizer (kv.set_optimizer, which DistributedOptimizer
    sets); set that before the first push (a table's rows hold the state of
    the optimizer they were first updated with).

    Steps: call the module once per step and backward once (each backward
    that reaches it is one push). In dist_sync every worker must push every
    table every step: a batch with no ids (empty bags) still pushes, with
    n = 0; a worker without a batch for a step calls skip_step() instead.

    Overlap: prefetch(next_input[, next_offsets]) starts the pull of the
    next batch's rows asynchronously, and forward on that batch only waits
    for it (a forward on other ids ignores it and pulls). Ordering: called
    between this step's forward and its backward, the pull is held back and
    issued right after backward's push of this step, so it overlaps the rest
    of backward and DistributedOptimizer.step(); called after backward, it
    is issued at once. Either way it is issued after this worker's push of
    the step, and in dist_sync a pull is answered with the rows after every
    worker's push of that step was applied: prefetched rows are exactly the
    ones a plain forward would pull, never a step stale. (dist_async has no
    steps: rows carry whatever updates the servers had applied when the pull
    reached them, prefetched or not.) wait() waits for this module's pushes
    and pulls in flight (forward, rows(), save() and load() do it; call it
    after the last step before the process reads the table elsewhere).
    """

    def __init__(self, key, num_embeddings, embedding_dim, mode="mean", kvstore=None,
                 init="normal", scale=0.01, seed=0, admit_after=0, expire_after=0,
                 max_rows=0, optimizer=None, optimizer_params=None,
                 include_last_offset=False, priority=0):
        super(ServerEmbeddingBag, self).__init__()
        from . import sparse as _sparse
        if not isinstance(key, str) or not key:
            raise TypeError("ServerEmbeddingBag: key must be a non-empty str (the table's key "
                            "in the store), got %r" % (key,))
        if mode not in ("sum", "mean"):
            raise ValueError("ServerEmbeddingBag %s: mode %r is not supported ('sum' or 'mean')"
                             % (key, mode))
        if int(embedding_dim) <= 0 or int(num_embeddings) < 0:
            raise ValueError("ServerEmbeddingBag %s: embedding_dim must be > 0 and "
                             "num_embeddings >= 0 (0: any id), got %r and %r"
                             % (key, embedding_dim, num_embeddings))
        if kvstore is None:
            kv = _store()
        elif isinstance(kvstore, _kv.KVStore):
            kv = kvstore
        else:
            kv = init(kvstore)
        self.key = key
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.mode = mode
        self.include_last_offset = bool(include_last_offset)
        self.priority = int(priority)
        self.kvstore = kv
        own = None
        if optimizer is not None:
            params = dict(optimizer_params or {})
            if not isinstance(optimizer, _opt.Optimizer) and "rescale_grad" not in params:
                params["rescale_grad"] = (1.0 / kv.num_workers if kv._handle.sums_workers
                                          else 1.0)
            own = _opt.create(optimizer, **params)
        elif optimizer_params:
            raise ValueError("ServerEmbeddingBag %s: optimizer_params without optimizer" % key)
        self.table = _sparse.Table(width=self.embedding_dim, num_rows=self.num_embeddings,
                                   init=init, scale=scale, seed=seed, admit_after=admit_after,
                                   expire_after=expire_after, max_rows=max_rows, optimizer=own)
        kv.init(key, self.table)
        self._pushes = []       # (handle, ids, rows): kept alive until waited for
        self._prefetched = None  # [ids, unique, inverse, out, handle or None]
        self._owed = False      # a forward with grad whose backward has not pushed yet

    def extra_repr(self):
        return "%r, %d, %d, mode=%r, kvstore=%r" % (self.key, self.num_embeddings,
                                                   self.embedding_dim, self.mode,
                                                   self.kvstore.type)

    # -- ids -----------------------------------------------------------------

    def _ids(self, input, what="input"):
        if not isinstance(input, _torch.Tensor):
            raise TypeError("ServerEmbeddingBag %s: %s must be a torch tensor of int64 ids, "
                            "got %s" % (self.key, what, type(input).__name__))
        if input.dtype not in (_torch.int64, _torch.int32):
            raise TypeError("ServerEmbeddingBag %s: ids must be int64 (or int32), got %s"
                            % (self.key, str(input.dtype).replace("torch.", "")))
        if input.device.type != "cpu":
            raise TypeError("ServerEmbeddingBag %s: ids are on %s: kvtrain.torch takes CPU "
                            "tensors" % (self.key, input.device))
        return input.to(_torch.int64)

    def _bags(self, input, offsets, per_sample_weights):
        """(flat ids, offsets, flat weights) in nn.EmbeddingBag's 1-D form."""
        ids = self._ids(input)
        if ids.dim() == 2:
            if offsets is not None:
                raise ValueError("ServerEmbeddingBag %s: offsets must be None for 2-D input "
                                 "(each row is a bag)" % self.key)
            batch, bag = ids.shape
            offsets = _torch.arange(batch, dtype=_torch.int64) * bag
            if self.include_last_offset:
                offsets = _torch.cat([offsets, offsets.new_tensor([batch * bag])])
            if per_sample_weights is not None:
                if tuple(per_sample_weights.shape) != tuple(ids.shape):
                    raise ValueError("ServerEmbeddingBag %s: per_sample_weights of shape %s "
                                     "for input of shape %s" % (
                                         self.key, tuple(per_sample_weights.shape),
                                         tuple(ids.shape)))
                per_sample_weights = per_sample_weights.reshape(-1)
            ids = ids.reshape(-1)
        elif ids.dim() == 1:
            if offsets is None:
                raise ValueError("ServerEmbeddingBag %s: 1-D input needs offsets (the bags' "
                                 "starts)" % self.key)
            if not isinstance(offsets, _torch.Tensor) or offsets.dim() != 1 or \
                    offsets.dtype not in (_torch.int64, _torch.int32):
                raise TypeError("ServerEmbeddingBag %s: offsets must be a 1-D int64 tensor"
                                % self.key)
            offsets = offsets.to(_torch.int64)
        else:
            raise ValueError("ServerEmbeddingBag %s: input must be 1-D (with offsets) or 2-D "
                             "(batch, bag), got %d-D" % (self.key, ids.dim()))
        return ids.contiguous(), offsets, per_sample_weights

    # -- transfers -----------------------------------------------------------

    def _start_pull(self, unique):
        out = _torch.empty((unique.numel(), self.embedding_dim), dtype=_torch.float32)
        if unique.numel() == 0:
            return out, None
        h = self._call(self.kvstore._handle.row_sparse_pull_async, self.key, unique.numpy(),
                       out.numpy(), self.priority)
        return out, h

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except _lib.KVTrainError as e:
            raise self._named(e)

    def _named(self, e):
        msg = str(e)
        if "position" in msg:
            try:
                return type(e)("%s (ServerEmbeddingBag %s: positions count the batch's "
                               "distinct ids in ascending order)" % (msg, self.key))
            except Exception:  # noqa: BLE001 (keep the original)
                return e
        return e

    def _wait(self, h):
        if h is not None:
            self._call(self.kvstore._handle.wait, h)

    def _wait_pushes(self):
        pushes, self._pushes = self._pushes, []
        first = None
        for h, _, _ in pushes:
            try:
                self._wait(h)
            except Exception as e:  # noqa: BLE001 (the first error is raised)
                first = first or e
        if first is not None:
            raise first

    def _push(self, unique, grad):
        grad = grad.detach()
        if grad.dtype != _torch.float32 or not grad.is_contiguous():
            grad = grad.float().contiguous()
        h = self._call(self.kvstore._handle.push_row_sparse_async, self.key, unique.numpy(),
                       grad.numpy(), self.priority)
        self._pushes.append((h, unique, grad))
        self._owed = False
        p = self._prefetched
        if p is not None and p[4] is None and p[3] is None:
            p[3], p[4] = self._start_pull(p[1])   # held back until this push was issued

    def _take_prefetched(self, ids):
        p, self._prefetched = self._prefetched, None
        if p is None:
            return None
        if p[3] is None:                # held back, and backward never pushed: pull now
            p[3], p[4] = self._start_pull(p[1])
        if p[0].shape == ids.shape and _torch.equal(p[0], ids):
            return p
        self._wait(p[4])                # another batch: drop it (its arrays stay alive till here)
        return None

    def wait(self):
        """Waits for this module's pushes and prefetch in flight; raises the
        first error among them."""
        p = self._prefetched
        if p is not None and p[4] is not None:
            try:
                self._wait(p[4])
            except Exception:
                self._prefetched = None
                raise
            p[4] = None     # arrived: forward on that batch uses the rows at once
        self._wait_pushes()

    def prefetch(self, input, offsets=None):
        """Starts pulling the rows of a batch the next forward will take
        (same input and offsets forms as forward). See the class's notes for
        the ordering: the rows are fresh in dist_sync."""
        ids, _, _ = self._bags(input, offsets, None)
        ids = ids.clone()   # compared with forward's: the caller may reuse its tensor
        unique, inverse = _unique(ids)
        old, self._prefetched = self._prefetched, None
        if old is not None and old[4] is not None:
            self._wait(old[4])
        if self._owed:
            self._prefetched = [ids, unique, inverse, None, None]   # issued by the push
        else:
            out, h = self._start_pull(unique)
            self._prefetched = [ids, unique, inverse, out, h]

    def skip_step(self):
        """Pushes no rows (n = 0) for this step: in dist_sync, what a worker
        without a batch for this step calls instead of forward and backward,
        so the other workers' step completes."""
        self._push(_torch.zeros(0, dtype=_torch.int64),
                   _torch.zeros((0, self.embedding_dim), dtype=_torch.float32))

    def forward(self, input, offsets=None, per_sample_weights=None):
        ids, offsets, per_sample_weights = self._bags(input, offsets, per_sample_weights)
        p = self._take_prefetched(ids)
        if p is not None:
            _, unique, inverse, rows, h = p
        else:
            unique, inverse = _unique(ids)
            rows, h = self._start_pull(unique)
        try:
            self._wait_pushes()
        finally:
            self._wait(h)
        if _torch.is_grad_enabled():
            rows.requires_grad_(True)
            rows.register_hook(lambda grad, unique=unique: self._push(unique, grad))
            self._owed = True
        return _torch.nn.functional.embedding_bag(
            inverse, rows, offsets, mode=self.mode, per_sample_weights=per_sample_weights,
            include_last_offset=self.include_last_offset)

    def rows(self, ids):
        """The table's current rows of `ids` (int64 tensor, any order,
        repeats allowed) as a float32 tensor (len(ids), embedding_dim); ids
        never pushed read as their initial value."""
        self.wait()
        ids = self._ids(ids, "ids").reshape(-1).contiguous()
        out = _torch.empty((ids.numel(), self.embedding_dim), dtype=_torch.float32)
        if ids.numel():
            self._call(self.kvstore.row_sparse_pull, self.key, out.numpy(), 0, ids.numpy())
        return out

    def save(self, path):
        """The whole table (every server's shard, with optimizer state) to
        one file; one worker calls it, after every worker's last step."""
        self.wait()
        self.kvstore.save_row_sparse(self.key, path)

    def load(self, path):
        """Restores a table save() wrote (one worker calls it)."""
        self.wait()
        self.kvstore.load_row_sparse(self.key, path)
