"""kvtrain.kv: the key-value store (MXNet's mx.kv).

    kv = kvtrain.kv.create('dist_sync')
    kv.init(3, numpy.ones((2, 3), numpy.float32))
    kv.push(3, [grad_on_dev0, grad_on_dev1])     # summed, then updated
    kv.pull(3, out=weights)                       # written in place

Keys are ints or strs; values are float32 C-contiguous numpy arrays (other
dtypes or layouts are an error naming the key, never a silent copy). A list
of arrays for one key is one value per device. Every call blocks with the
GIL released; Ctrl-C raises KeyboardInterrupt and, in a distributed job,
stops the other processes too.

In a server or scheduler process of a job started by tracker/launch.py,
create() serves until the job ends and then exits the process, as MXNet's
servers do: the rest of a training script runs on the workers only.
"""

import sys

import numpy as np

from . import _lib
from . import base
from . import optimizer as _opt
from . import sparse as _sparse

TYPES = tuple(_lib.kvstore_types())


def _is_key(k):
    return isinstance(k, (int, np.integer, str)) and not isinstance(k, bool)


def _norm_key(k):
    return int(k) if isinstance(k, np.integer) else k


def _flatten(key, value, what, allow_none=False):
    """(keys, arrays) with one entry per array: key k with [a, b] becomes
    ([k, k], [a, b]); [k1, k2] with [a, [b1, b2]] becomes ([k1, k2, k2], ...)."""
    if _is_key(key):
        keys, values = [_norm_key(key)], [value]
    elif isinstance(key, (list, tuple)):
        keys = [_norm_key(k) for k in key]
        if not all(_is_key(k) for k in key):
            raise TypeError("%s: keys must be ints or strs, got %r" % (what, key))
        if not isinstance(value, (list, tuple)) or len(value) != len(keys):
            raise ValueError("%s: %d keys need a list of %d values" % (what, len(keys), len(keys)))
        values = list(value)
    else:
        raise TypeError("%s: a key must be an int or a str (or a list of them), got %s"
                        % (what, type(key).__name__))
    flat_keys, flat_values = [], []
    for k, v in zip(keys, values):
        group = v if isinstance(v, (list, tuple)) else [v]
        if not group:
            raise ValueError("%s: key %r has an empty list of values" % (what, k))
        for a in group:
            if not isinstance(a, np.ndarray):
                raise TypeError("%s: key %r: expected a numpy array, got %s"
                                % (what, k, type(a).__name__))
            flat_keys.append(k)
            flat_values.append(a)
    return flat_keys, flat_values


class KVStore(object):
    """A store of one of the TYPES; make one with kvtrain.kv.create."""

    def __init__(self, handle):
        self._handle = handle
        if handle.is_distributed:
            base.track(self)

    @property
    def type(self):
        return self._handle.type

    @property
    def rank(self):
        """This worker's rank (0 for single-process stores)."""
        return self._handle.rank

    @property
    def num_workers(self):
        return self._handle.num_workers

    def init(self, key, value):
        """Sets keys' initial values (dist stores: rank 0's win). A
        kvtrain.sparse.Table (or an all-zero RowSparseArray) declares a
        row-sparse key."""
        if isinstance(value, (_sparse.Table, _sparse.RowSparseArray)):
            self._init_row_sparse(_norm_key(key), value)
            return
        keys, values = _flatten(key, value, "init")
        self._handle.init(keys, values)

    def _init_row_sparse(self, key, value):
        if isinstance(value, _sparse.RowSparseArray):
            if value.indices.size and np.any(value.data):
                raise ValueError(
                    "init: key %r: a row-sparse key's rows start from its initializer; "
                    "declare it with kvtrain.sparse.Table(width, init=...)" % (key,))
            value = _sparse.Table(width=value.shape[1], num_rows=max(value.shape[0], 0))
        opt = value.optimizer
        if opt is not None and not isinstance(opt, _opt.Optimizer):
            raise TypeError("init: key %r: a table's optimizer is a kvtrain.optimizer.Optimizer, "
                            "got %s" % (key, type(opt).__name__))
        self._handle.init_row_sparse(key, value.width, value.num_rows, value.init, value.scale,
                                     value.seed, value.admit_after, value.expire_after,
                                     value.max_rows, None if opt is None else opt.spec)

    def push(self, key, value, priority=0):
        """Pushes values (a key's several values are summed), then the key's
        update runs: the optimizer if set, else the value becomes the sum."""
        if type(key) in (int, str) and type(value) is np.ndarray:
            self._handle.push([key], [value], int(priority))
            return
        if _is_key(key) and _is_row_sparse(value):
            parts = value if isinstance(value, (list, tuple)) else [value]
            ids = np.concatenate([p.indices for p in parts]) if len(parts) > 1 else parts[0].indices
            rows = np.concatenate([p.data for p in parts]) if len(parts) > 1 else parts[0].data
            self._handle.push_row_sparse(_norm_key(key), ids, rows, int(priority))
            return
        keys, values = _flatten(key, value, "push")
        self._handle.push(keys, values, int(priority))

    def pull(self, key, out=None, priority=0):
        """Copies each key's value into `out` (an array, or one per device)."""
        if out is None:
            raise ValueError("pull: out= is required (the arrays to write)")
        if type(key) in (int, str) and type(out) is np.ndarray:
            self._handle.pull([key], [out], int(priority))
            return
        keys, outs = _flatten(key, out, "pull")
        self._handle.pull(keys, outs, int(priority))

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        """Copies the rows `row_ids` (int64, any order, repeats allowed) of a
        row-sparse key into `out`: a float32 array of shape (len(row_ids),
        width), filled in row_ids' order, or a RowSparseArray, which gets the
        unique ids in ascending order and their rows (MXNet's form). Rows
        never pushed read as their initial value."""
        if out is None or row_ids is None:
            raise ValueError("row_sparse_pull: out= and row_ids= are required")
        key = _norm_key(key)
        ids = np.ascontiguousarray(row_ids)
        if isinstance(out, _sparse.RowSparseArray):
            unique = np.unique(ids.astype(np.int64)) if ids.dtype.kind in "iu" else ids
            rows = np.empty((len(unique), out.shape[1]), np.float32)
            self._handle.row_sparse_pull(key, unique, rows, int(priority))
            out.indices, out.data = unique, rows
            return
        self._handle.row_sparse_pull(key, ids, out, int(priority))

    def save_row_sparse(self, key, fname):
        """The whole table of a row-sparse key (every server's shard, with
        optimizer state) to one checksummed file; one worker calls it."""
        self._handle.save_row_sparse(_norm_key(key), fname)

    def load_row_sparse(self, key, fname):
        self._handle.load_row_sparse(_norm_key(key), fname)

    def row_sparse_stats(self, key):
        """A row-sparse key's table counters, a dict per server (one for the
        local stores): rows, created, evicted, expired, pending (ids awaiting
        admission), dropped_grads, updates, bytes."""
        return self._handle.row_sparse_stats(_norm_key(key))

    def pushpull(self, key, value, out=None, priority=0):
        """push then pull, in one round trip; out=None writes into `value`."""
        if (type(key) in (int, str) and type(value) is np.ndarray
                and (out is None or type(out) is np.ndarray)):
            # One key, one array: the common case, without the list handling.
            self._handle.pushpull([key], [value], [value if out is None else out],
                                  int(priority))
            return
        keys, values = _flatten(key, value, "pushpull")
        if out is None:
            self._handle.pushpull(keys, values, values, int(priority))
            return
        okeys, outs = _flatten(key, out, "pushpull")
        if okeys == keys:
            self._handle.pushpull(keys, values, outs, int(priority))
        else:
            # As many outs as values per key is one round trip; otherwise two.
            self._handle.push(keys, values, int(priority))
            self._handle.pull(okeys, outs, int(priority))

    def set_optimizer(self, optimizer):
        """The optimizer the store applies on every push (a
        kvtrain.optimizer.Optimizer; dist stores send its spec to the servers)."""
        if not isinstance(optimizer, _opt.Optimizer):
            raise TypeError("set_optimizer: expected a kvtrain.optimizer.Optimizer "
                            "(kvtrain.optimizer.create('sgd', ...)), got %s"
                            % type(optimizer).__name__)
        self._handle.set_optimizer(optimizer.spec)

    def set_gradient_compression(self, compression_params):
        """Compresses the gradients every later push sends (MXNet's call):
        {'type': '2bit', 'threshold': 0.5} (or 'threshold': 'auto', each
        array its own), {'type': '1bit'},
        {'type': 'fp16'} or {'type': 'none'}; 'min_bytes': arrays smaller
        than this travel uncompressed (default 0); 'pull': 'fp16' or
        'float32', what push-pulls bring back (default: fp16 for fp16,
        float32 for 2bit and 1bit). Dist stores only; call it on every worker
        before init. See docs/kvstore.md."""
        if not isinstance(compression_params, dict):
            raise TypeError("set_gradient_compression: expected a dict such as "
                            "{'type': '2bit', 'threshold': 0.5}, got %s"
                            % type(compression_params).__name__)
        unknown = sorted(set(compression_params) - {"type", "threshold", "min_bytes", "pull"})
        if unknown:
            raise ValueError("set_gradient_compression: unknown parameter(s) %s "
                             "(valid: type, threshold, min_bytes, pull)"
                             % ", ".join(map(repr, unknown)))
        if "type" not in compression_params:
            raise ValueError("set_gradient_compression: 'type' is required "
                             "(none, 2bit, 1bit or fp16)")
        threshold = compression_params.get("threshold", 0.5)
        if threshold != "auto":
            threshold = repr(float(threshold))
        self._handle.set_gradient_compression(
            str(compression_params["type"]), threshold,
            int(compression_params.get("min_bytes", 0)),
            str(compression_params.get("pull", "")))

    def set_async_options(self, staleness=None, lr="constant"):
        """Asynchronous stores (dist_async, dist_ssp; docs/kvstore.md):
        `staleness`, a number of steps: no worker runs more than that many
        steps ahead of the slowest (None: the store's default, 2 for
        dist_ssp and unbounded for dist_async; 0 waits for every worker each
        step). `lr`: 'constant', or 'staleness' to divide each push's step,
        learning rate / (1 - momentum), by 1 + the updates its weights
        missed (momentum lowered first, then the rate). Call it on every
        worker before the first push; other stores raise."""
        if lr not in ("constant", "staleness"):
            raise ValueError("set_async_options: lr must be 'constant' or 'staleness', got %r"
                             % (lr,))
        if staleness is None:
            staleness = self._handle.async_options()["staleness"]
        elif isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
            raise ValueError("set_async_options: staleness must be a number of steps >= 0 "
                             "(None: the store's default), got %r" % (staleness,))
        self._handle.set_async_options(staleness, lr == "staleness")

    @property
    def async_options(self):
        """{'staleness': steps (-1: unbounded), 'staleness_lr': bool}."""
        return self._handle.async_options()

    def staleness_report(self):
        """Asynchronous stores: this worker's pushes since the last call,
        from every server: {'pushes', 'mean', 'max' (the updates a key got
        from other workers between this worker's read and its push),
        'held_seconds' (answers held for the slowest worker)}."""
        return self._handle.staleness_report()

    @property
    def resume_step(self):
        """In a worker started again in place of a dead one (launch.py
        --max-restarts), after its first init: the steps the job completed,
        from which this worker goes on (a training loop skips that many
        batches); -1 in a process of the job's first start."""
        return self._handle.resume_step

    def server_losses(self):
        """With server replicas (launch.py --server-replicas): the servers
        this worker lost since the last call and the pauses their deaths cost
        it: {'servers', 'pause_seconds'} (zeros otherwise)."""
        return self._handle.server_losses()

    @property
    def gradient_compression(self):
        """The compression set: {'type': ...} (and 'threshold' for 2bit,
        'min_bytes' and 'pull' where set)."""
        return self._handle.gradient_compression()

    def save_residuals(self, fname):
        """This worker's 2bit/1bit error-feedback residuals (every worker
        saves its own)."""
        self._handle.save_residuals(fname)

    def load_residuals(self, fname):
        self._handle.load_residuals(fname)

    def barrier(self):
        """Returns once every worker has called it."""
        self._handle.barrier()

    def save_optimizer_states(self, fname, dump_optimizer=False):
        """Every key's optimizer state (dist stores: from the servers)."""
        self._handle.save_optimizer_states(fname)

    def load_optimizer_states(self, fname):
        self._handle.load_optimizer_states(fname)

    def close(self):
        """Leaves the job (dist stores; every worker calls it once). Done at
        interpreter exit for a store that was not closed."""
        self._handle.finalize()

    def __repr__(self):
        return "<KVStore %s rank %d of %d>" % (self.type, self.rank, self.num_workers)


def _is_row_sparse(value):
    if isinstance(value, (list, tuple)):
        return bool(value) and all(isinstance(v, _sparse.RowSparseArray) for v in value)
    return isinstance(value, _sparse.RowSparseArray)


def create(name="local"):
    """A store: local, device, dist_sync, dist_device_sync, dist_async or
    dist_allreduce. A dist type joins the job tracker/launch.py started; in a
    server or scheduler process it serves until the job ends, then exits."""
    if isinstance(name, KVStore):
        return name
    if not isinstance(name, str):
        raise TypeError("kv.create: expected a store type name, got %s" % type(name).__name__)
    handle = _lib.KVStore.create(name)
    if handle.role != "worker":
        handle.run_server()
        sys.exit(0)
    return KVStore(handle)
