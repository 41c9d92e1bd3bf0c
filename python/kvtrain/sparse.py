"""kvtrain.sparse: row-sparse values for the store (MXNet's row_sparse).

A row-sparse key is a table of rows of `width` float32 values indexed by
int64 row ids (an embedding): only the rows a call names move, rows come
into being when first pushed, and dist stores spread each table's rows over
all servers. Declare one with a Table (or, as MXNet scripts do, with an
all-zero RowSparseArray of the table's shape):

    kv.init('emb', kvtrain.sparse.Table(width=16, init='normal', scale=0.01))
    kv.push('emb', kvtrain.sparse.RowSparseArray(grad_rows, ids, (0, 16)))
    kv.row_sparse_pull('emb', out=rows, row_ids=ids)   # rows: (len(ids), 16)

See docs/sparse.md.
"""

import numpy as np

from . import _lib


class Table(object):
    """A row-sparse key's declaration.

    width: values per row. num_rows: valid ids are [0, num_rows); 0 (the
    default) allows any id >= 0. init: 'zeros', 'uniform' (in [-scale,
    scale)), 'normal' (standard deviation `scale`) or 'constant' (every
    value `scale`, e.g. 1 for MXNet's tables of ones); a row's initial value
    depends only on (seed, key, row id). admit_after: a row is created at its
    n-th push (before that, pulls give its initial value and its gradients
    are dropped). expire_after: rows unused for that many updates are
    dropped. max_rows: rows per server at most (least recently used
    evicted). 0 disables each of the last three. optimizer: the table's own
    rule (a kvtrain.optimizer.Optimizer, e.g. adagrad for the embeddings
    while the dense keys use adam); None: the store's."""

    def __init__(self, width, num_rows=0, init="zeros", scale=0.0, seed=0,
                 admit_after=0, expire_after=0, max_rows=0, optimizer=None):
        self.width = int(width)
        self.num_rows = int(num_rows)
        self.init = str(init)
        self.scale = float(scale)
        self.seed = int(seed)
        self.admit_after = int(admit_after)
        self.expire_after = int(expire_after)
        self.max_rows = int(max_rows)
        self.optimizer = optimizer

    def __repr__(self):
        return ("Table(width=%d, num_rows=%d, init=%r, scale=%g, seed=%d, admit_after=%d, "
                "expire_after=%d, max_rows=%d)"
                % (self.width, self.num_rows, self.init, self.scale, self.seed,
                   self.admit_after, self.expire_after, self.max_rows))


class RowSparseArray(object):
    """Rows `data` (n, width) float32 at row ids `indices` (n,) int64 of a
    (num_rows, width) matrix; num_rows 0 means unbounded. MXNet's
    RowSparseNDArray: `.data`, `.indices`, `.shape`, `.stype`."""

    stype = "row_sparse"

    def __init__(self, data, indices, shape):
        self.data = np.ascontiguousarray(data, dtype=np.float32)
        self.indices = np.ascontiguousarray(indices, dtype=np.int64)
        self.shape = tuple(int(d) for d in shape)
        if len(self.shape) != 2:
            raise ValueError("a row-sparse array is 2-D (rows, width), got shape %r"
                             % (self.shape,))
        if self.data.ndim != 2 or self.data.shape[1] != self.shape[1]:
            raise ValueError("row-sparse data of shape %r does not hold rows of width %d"
                             % (self.data.shape, self.shape[1]))
        if self.indices.shape != (self.data.shape[0],):
            raise ValueError("%d row ids for %d rows" % (self.indices.size, self.data.shape[0]))

    def asnumpy(self):
        """The dense matrix (num_rows must be set and small enough)."""
        if self.shape[0] <= 0:
            raise ValueError("asnumpy: the array has no row count")
        out = np.zeros(self.shape, np.float32)
        np.add.at(out, self.indices, self.data)
        return out

    def __repr__(self):
        return "<RowSparseArray %d rows of %r>" % (self.indices.size, self.shape)


def row_sparse_array(arg, shape=None):
    """MXNet's mx.nd.sparse.row_sparse_array((data, indices), shape=...)."""
    data, indices = arg
    data = np.asarray(data, dtype=np.float32)
    if shape is None:
        shape = (int(np.max(indices)) + 1 if len(indices) else 0, data.shape[1])
    return RowSparseArray(data, indices, shape)


def zeros(stype, shape, **kwargs):
    """MXNet's mx.nd.sparse.zeros('row_sparse', shape): a table of zeros."""
    if stype != "row_sparse":
        raise ValueError("sparse.zeros: only 'row_sparse' is supported, got %r" % (stype,))
    return RowSparseArray(np.zeros((0, shape[1]), np.float32), np.zeros(0, np.int64), shape)


def read_table(path):
    """The rows of a table file saved by kv.save_row_sparse: (key, ids,
    rows), ids int64 (n,) sorted, rows float32 (n, width); only rows the
    table held (trained and admitted), without optimizer state."""
    return _lib.read_table(str(path))


def export_table(path, out, format="text"):
    """Writes a saved table's rows to `out`: 'text' (one "id v1 ... vW" a
    line, floats exact) or 'binary' ("KVROWS01", int64 width, int64 n, n
    int64 ids, n x width float32; docs/sparse.md)."""
    _lib.export_table(str(path), str(out), format)
