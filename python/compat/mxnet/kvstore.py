"""mx.kv: MXNet's KVStore calls over kvtrain's store.

Values are NDArrays (or numpy arrays) of any dtype MXNet has; the store
keeps every key in float32 and each pull writes into the out array's own
dtype, so float16 keys are summed and updated in float32 and rounded to
float16 once, on the way out (MXNet with multi_precision=True does the
same; without it MXNet rounds after each addition, which can differ in the
last bit). Row-sparse keys are kvtrain tables (docs/sparse.md).
"""

import numpy as np

import kvtrain as _kt

from . import optimizer as _opt
from .base import NotInKvtrain
from .ndarray import NDArray
from .ndarray.sparse import RowSparseNDArray

# MXNet's capability names (KVStore.is_capable).
OPTIMIZER = "optimizer"


def _is_key(k):
    return isinstance(k, (int, np.integer, str)) and not isinstance(k, bool)


def _pairs(key, value, what):
    """[(key, [value, ...])]: one entry per key, its values one per device."""
    if _is_key(key):
        keys, values = [key], [value]
    elif isinstance(key, (list, tuple)) and all(_is_key(k) for k in key):
        if not isinstance(value, (list, tuple)) or len(value) != len(key):
            raise ValueError("%s: %d keys need a list of %d values" % (what, len(key), len(key)))
        keys, values = list(key), list(value)
    else:
        raise TypeError("%s: a key is an int or a str (or a list of them), got %r"
                        % (what, key))
    out = []
    for k, v in zip(keys, values):
        group = list(v) if isinstance(v, (list, tuple)) else [v]
        if not group:
            raise ValueError("%s: key %r has an empty list of values" % (what, k))
        for a in group:
            if not isinstance(a, (NDArray, np.ndarray)):
                raise TypeError("%s: key %r: expected an NDArray, got %s"
                                % (what, k, type(a).__name__))
        out.append((int(k) if isinstance(k, np.integer) else k, group))
    return out


def _f32(a):
    """A float32 C-contiguous host array of a dense value."""
    values = a._data if isinstance(a, NDArray) else a
    return np.ascontiguousarray(values, dtype=np.float32)


def _rows(a):
    """kvtrain's row-sparse value of a RowSparseNDArray."""
    width = int(np.prod(a.shape[1:]))
    return _kt.sparse.RowSparseArray(np.asarray(a._data, np.float32).reshape(-1, width),
                                     a._indices, (a.shape[0], width))


class KVStore(object):
    """MXNet's KVStore; make one with mx.kv.create."""

    def __init__(self, store):
        self._kv = store
        self._updater = None
        self._sparse = set()

    @property
    def handle(self):
        """kvtrain's own store under this face."""
        return self._kv

    @property
    def type(self):
        return self._kv.type

    @property
    def rank(self):
        return self._kv.rank

    @property
    def num_workers(self):
        return self._kv.num_workers

    def init(self, key, value):
        for k, group in _pairs(key, value, "init"):
            v = group[0]
            if isinstance(v, RowSparseNDArray):
                self._init_table(k, v)
            else:
                self._kv.init(k, _f32(v))

    def _init_table(self, key, value):
        if value.ndim != 2:
            raise ValueError("init: key %r: a row-sparse key is 2-D (rows, width), got shape %s"
                             % (key, value.shape))
        rows, width = value.shape
        data = np.asarray(value._data, np.float32)
        if data.size == 0 or not np.any(data):
            table = _kt.sparse.Table(width=width, num_rows=rows)
        elif len(value._indices) == rows and np.all(data == data.flat[0]):
            table = _kt.sparse.Table(width=width, num_rows=rows, init="constant",
                                     scale=float(data.flat[0]))
        else:
            raise NotInKvtrain(
                "init: key %r: a row-sparse key holding arbitrary rows" % (key,),
                "its rows start as zeros or one constant (or kvtrain.sparse.Table's "
                "uniform/normal); push the rest as a first update")
        self._kv.init(key, table)
        self._sparse.add(key)

    def push(self, key, value, priority=0):
        """Sums a key's values (one per device), then the store's update runs."""
        for k, group in _pairs(key, value, "push"):
            if any(isinstance(v, RowSparseNDArray) for v in group):
                if not all(isinstance(v, RowSparseNDArray) for v in group):
                    raise TypeError("push: key %r mixes dense and row-sparse values" % (k,))
                self._kv.push(k, [_rows(v) for v in group] if len(group) > 1
                              else _rows(group[0]), priority)
            elif self._updater is not None:
                self._push_to_updater(k, group, priority)
            else:
                self._kv.push(k, [_f32(v) for v in group], priority)

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        """Copies each key's value into `out` (its dtype), one per device."""
        if out is None:
            raise ValueError("pull: out= is required (the NDArrays to write)")
        for k, group in _pairs(key, out, "pull"):
            if k in self._sparse:
                if ignore_sparse:
                    continue
                raise ValueError("pull: key %r is row-sparse; use row_sparse_pull" % (k,))
            got = np.empty(group[0].shape, np.float32)
            self._kv.pull(k, got, priority)
            for o in group:
                _write(o, got)

    def pushpull(self, key, value, out=None, priority=0):
        self.push(key, value, priority)
        if out is not None:
            self.pull(key, out, priority)

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        """The rows `row_ids` (any order, repeats allowed) of a row-sparse
        key into `out`, which then holds exactly those rows."""
        if out is None or row_ids is None:
            raise ValueError("row_sparse_pull: out= and row_ids= are required")
        outs = out if isinstance(out, (list, tuple)) else [out]
        ids_list = row_ids if isinstance(row_ids, (list, tuple)) else [row_ids] * len(outs)
        if len(ids_list) != len(outs):
            raise ValueError("row_sparse_pull: %d outs need %d row_ids, got %d"
                             % (len(outs), len(outs), len(ids_list)))
        for o, ids in zip(outs, ids_list):
            if not isinstance(o, RowSparseNDArray):
                raise TypeError("row_sparse_pull: key %r: out must be a RowSparseNDArray, got %s"
                                % (key, type(o).__name__))
            want = np.unique(np.asarray(ids._data if isinstance(ids, NDArray) else ids)
                             .reshape(-1).astype(np.int64))
            rows = np.empty((len(want), int(np.prod(o.shape[1:]))), np.float32)
            if len(want):
                self._kv.row_sparse_pull(key, out=rows, row_ids=want, priority=priority)
            o._set_rows(want, rows)

    def set_optimizer(self, optimizer):
        """The update the store applies: an mx.optimizer by MXNet's name
        (mx.optimizer.create('sgd', ...)); a Python subclass cannot run on
        the servers and is refused."""
        self._kv.set_optimizer(_opt.to_kvtrain(optimizer))

    def set_gradient_compression(self, compression_params):
        self._kv.set_gradient_compression(dict(compression_params))

    def is_capable(self, capability):
        if capability == OPTIMIZER:
            return True
        raise ValueError("is_capable: unknown capability %r (MXNet has %r)"
                         % (capability, OPTIMIZER))

    def _set_updater(self, updater):
        """A Python updater(key, recv, stored) for a local store: each push
        is summed by the store, then `updater` changes the stored value."""
        if self._kv.type.startswith("dist"):
            raise NotInKvtrain("_set_updater on a %s store (a Python updater on the servers)"
                               % self._kv.type,
                               "set_optimizer sends a built-in optimizer to the servers")
        self._updater = updater

    def _push_to_updater(self, key, group, priority):
        shape = group[0].shape
        stored = np.empty(shape, np.float32)
        self._kv.pull(key, stored, priority)
        self._kv.push(key, [_f32(v) for v in group], priority)  # the store sums
        merged = np.empty(shape, np.float32)
        self._kv.pull(key, merged, priority)
        weight = NDArray(stored)
        self._updater(key, NDArray(merged), weight)
        self._kv.push(key, _f32(weight), priority)  # becomes the stored value

    def _barrier(self):
        self._kv.barrier()

    barrier = _barrier

    def save_optimizer_states(self, fname, dump_optimizer=False):
        self._kv.save_optimizer_states(fname)

    def load_optimizer_states(self, fname):
        self._kv.load_optimizer_states(fname)

    def __repr__(self):
        return "<mxnet KVStore over kvtrain %s rank %d of %d>" % (self.type, self.rank,
                                                                   self.num_workers)


def _write(out, values):
    if isinstance(out, RowSparseNDArray):
        raise TypeError("pull: out is a RowSparseNDArray; use row_sparse_pull")
    if not isinstance(out, NDArray):
        np.copyto(out, values.reshape(out.shape), casting="unsafe")
        return
    out._data[...] = values.reshape(out.shape).astype(out._data.dtype)


def create(name="local"):
    """A store: local, device, dist_sync, dist_device_sync, dist_async or
    dist_allreduce (MXNet's 'horovod' and 'byteps' are not here). In a
    server or scheduler process this serves until the job ends, then exits."""
    if isinstance(name, KVStore):
        return name
    if name in ("horovod", "byteps", "nccl", "p3"):
        raise NotInKvtrain("kvstore type %r" % (name,),
                           "dist_allreduce is kvtrain's all-reduce, dist_sync its parameter "
                           "server")
    return KVStore(_kt.kv.create(name))
