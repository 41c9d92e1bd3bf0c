"""mx.nd.sparse: row-sparse arrays (MXNet's RowSparseNDArray).

A row-sparse array of shape (rows, ...) holds `data`, the rows it has, and
`indices`, their ids in ascending order; every other row is zero. In the
store a row-sparse key is a kvtrain table (docs/sparse.md). CSR arrays are
not available: mx.nd.sparse.csr_matrix raises an error saying so.
"""

import numpy as np

from ..base import NotInKvtrain
from . import NDArray, _dtype, _shape, _values


class RowSparseNDArray(NDArray):
    stype = "row_sparse"

    def __init__(self, data, indices, shape, ctx=None):
        # _data: the rows held; _indices: their ids, ascending, unique.
        super().__init__(data, ctx)
        self._indices = indices
        self._full_shape = tuple(shape)

    @classmethod
    def from_dense(cls, values, ctx=None):
        values = np.asarray(values)
        if values.ndim < 1:
            raise ValueError("tostype('row_sparse'): a 0-d array has no rows")
        flat = values.reshape(values.shape[0], -1)
        ids = np.flatnonzero(np.any(flat != 0, axis=1)).astype(np.int64)
        return cls(values[ids].copy(), ids, values.shape, ctx)

    @property
    def shape(self):
        return self._full_shape

    @property
    def size(self):
        return int(np.prod(self._full_shape))

    @property
    def ndim(self):
        return len(self._full_shape)

    @property
    def data(self):
        return NDArray(self._data, self._ctx)

    @property
    def indices(self):
        return NDArray(self._indices, self._ctx)

    def asnumpy(self):
        out = np.zeros(self._full_shape, self._data.dtype)
        out[self._indices] = self._data
        return out

    def __array__(self, dtype=None):
        out = self.asnumpy()
        return out if dtype is None else out.astype(dtype)

    def tostype(self, stype):
        if stype == "default":
            return NDArray(self.asnumpy(), self._ctx)
        if stype == "row_sparse":
            return self.copy()
        raise NotInKvtrain("stype %r" % (stype,), "kvtrain has dense and row_sparse arrays")

    def copy(self):
        return RowSparseNDArray(self._data.copy(), self._indices.copy(), self._full_shape,
                                self._ctx)

    def astype(self, dtype, copy=True):
        return RowSparseNDArray(self._data.astype(_dtype(dtype)), self._indices.copy(),
                                self._full_shape, self._ctx)

    def copyto(self, other):
        if isinstance(other, RowSparseNDArray):
            if other.shape != self.shape:
                raise ValueError("copyto: shape %s into shape %s" % (self.shape, other.shape))
            other._data = self._data.astype(other._data.dtype)
            other._indices = self._indices.copy()
            return other
        return NDArray(self.asnumpy(), self._ctx).copyto(other)

    def _set_rows(self, ids, rows):
        """The store's answer: exactly these rows (ids ascending)."""
        self._indices = np.asarray(ids, np.int64)
        self._data = np.asarray(rows).astype(self._data.dtype).reshape(
            (len(self._indices),) + self._full_shape[1:])

    def __getitem__(self, index):
        return NDArray(self.asnumpy(), self._ctx)[index]

    def __setitem__(self, index, value):
        raise NotInKvtrain("assigning into a RowSparseNDArray",
                           "build it dense and call tostype('row_sparse')")

    def _new(self, values):
        return NDArray(self.asnumpy(), self._ctx)._new(values)

    # Arithmetic is dense (as MXNet's for most operators): through asnumpy.
    def _dense(self):
        return NDArray(self.asnumpy(), self._ctx)

    def __add__(self, o):
        return self._dense() + o

    __radd__ = __add__

    def __sub__(self, o):
        return self._dense() - o

    def __rsub__(self, o):
        return o - self._dense()

    def __mul__(self, o):
        return self._dense() * o

    __rmul__ = __mul__

    def __truediv__(self, o):
        return self._dense() / o

    def __neg__(self):
        return -self._dense()

    def __repr__(self):
        return "\n<RowSparseNDArray %s @%s>" % ("x".join(str(s) for s in self.shape),
                                                self._ctx)


def zeros(stype, shape, ctx=None, dtype=None, **kwargs):
    """An all-zero array of storage type `stype` ('row_sparse' or 'default')."""
    shape = _shape(shape)
    d = _dtype(dtype)
    if stype == "default":
        return NDArray(np.zeros(shape, d), ctx)
    if stype != "row_sparse":
        raise NotInKvtrain("mx.nd.sparse.zeros(%r)" % (stype,),
                           "kvtrain has dense and row_sparse arrays")
    return RowSparseNDArray(np.zeros((0,) + shape[1:], d), np.zeros(0, np.int64), shape, ctx)


def row_sparse_array(arg1, shape=None, ctx=None, dtype=None):
    """From (data, indices) and a shape, or from a dense array."""
    if isinstance(arg1, tuple) and len(arg1) == 2:
        data, indices = (np.asarray(_values(a)) for a in arg1)
        d = _dtype(dtype, data.dtype if isinstance(arg1[0], NDArray) else np.float32)
        indices = indices.astype(np.int64)
        if shape is None:
            shape = (int(indices.max()) + 1 if indices.size else 0,) + data.shape[1:]
        order = np.argsort(indices, kind="stable")
        if np.any(np.diff(indices[order]) == 0):
            raise ValueError("row_sparse_array: row ids repeat")
        return RowSparseNDArray(data[order].astype(d), indices[order], _shape(shape), ctx)
    dense = np.asarray(_values(arg1))
    return RowSparseNDArray.from_dense(dense.astype(_dtype(dtype, np.float32)), ctx)


def csr_matrix(*args, **kwargs):
    raise NotInKvtrain("mx.nd.sparse.csr_matrix (CSR storage)",
                       "use a dense array, or row_sparse for embedding gradients")
