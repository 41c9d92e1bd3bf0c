"""mx.nd: MXNet's NDArray over a host array.

An NDArray holds its values in host memory (a numpy array it owns or a view
of another NDArray's), with MXNet 1.x's behaviour where numpy's differs:
creation functions default to float32 (also from float64 numpy data),
integer indexing of a 1-D array keeps one element as shape (1,), and
comparisons give arrays of the operands' dtype holding 0 and 1. Work is
synchronous, so wait_to_read() and waitall() return at once.
"""

import numpy as np

from ..base import NotInKvtrain
from ..context import Context, current_context

# The dtypes MXNet's NDArray holds.
DTYPES = {np.dtype(t) for t in ("float32", "float16", "float64", "int32", "int64", "uint8",
                                "int8", "bool")}


def _dtype(dtype, default=np.float32):
    if dtype is None:
        return np.dtype(default)
    d = np.dtype(dtype)
    if d not in DTYPES:
        raise TypeError("NDArray: dtype %s is not one MXNet has (%s)"
                        % (d, ", ".join(sorted(str(t) for t in DTYPES))))
    return d


def _shape(shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def _values(x):
    """The numpy value of an operand (NDArray, numpy array or number)."""
    if isinstance(x, NDArray):
        return x.asnumpy() if x.stype != "default" else x._data
    return x


class NDArray(object):
    """A dense n-dimensional array (MXNet's mx.nd.NDArray)."""

    __array_priority__ = 1000.0  # numpy_array + nd -> NDArray
    stype = "default"

    def __init__(self, data, ctx=None):
        self._data = data
        self._ctx = ctx or current_context()

    # -- what it is -------------------------------------------------------
    @property
    def shape(self):
        return self._data.shape

    @property
    def dtype(self):
        return self._data.dtype.type

    @property
    def size(self):
        return int(self._data.size)

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def context(self):
        return self._ctx

    ctx = context

    @property
    def T(self):
        return NDArray(np.ascontiguousarray(self._data.T), self._ctx)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return "\n%s\n<%s %s @%s>" % (self._data, type(self).__name__,
                                     "x".join(str(s) for s in self.shape), self._ctx)

    # -- copies and conversions -------------------------------------------
    def asnumpy(self):
        return np.array(self._data, copy=True)

    def __array__(self, dtype=None):
        return self._data if dtype is None else self._data.astype(dtype)

    def asscalar(self):
        if self.size != 1:
            raise ValueError("asscalar: the array has shape %s, not a single value"
                             % (self.shape,))
        return self._data.reshape(-1)[0]

    def astype(self, dtype, copy=True):
        d = _dtype(dtype)
        if not copy and d == self._data.dtype:
            return self
        return NDArray(self._data.astype(d), self._ctx)

    def copy(self):
        return NDArray(self._data.copy(), self._ctx)

    def copyto(self, other):
        """Into another NDArray (same shape; its dtype) or onto a Context."""
        if isinstance(other, Context):
            return NDArray(self._data.copy(), other)
        if not isinstance(other, NDArray):
            raise TypeError("copyto: expected an NDArray or a Context, got %s"
                            % type(other).__name__)
        if other.shape != self.shape:
            raise ValueError("copyto: shape %s into shape %s" % (self.shape, other.shape))
        other._data[...] = self._data
        return other

    def as_in_context(self, ctx):
        return self if ctx == self._ctx else self.copyto(ctx)

    def reshape(self, *shape, **kwargs):
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        shape = kwargs.get("shape", shape)
        # MXNet: 0 keeps that dimension; -1 is inferred.
        for i, s in enumerate(shape):
            if int(s) == 0 and i >= self.ndim:
                raise ValueError("reshape: 0 at position %d copies no dimension of %s"
                                 % (i, self.shape))
        shape = tuple(self.shape[i] if int(s) == 0 else int(s) for i, s in enumerate(shape))
        return NDArray(self._data.reshape(shape), self._ctx)

    def flatten(self):
        return self.reshape((self.shape[0], -1))

    def tostype(self, stype):
        if stype == "default":
            return self.copy()
        if stype == "row_sparse":
            from .sparse import RowSparseNDArray
            return RowSparseNDArray.from_dense(self._data, self._ctx)
        raise NotInKvtrain("stype %r" % (stype,), "kvtrain has dense and row_sparse arrays")

    def wait_to_read(self):
        """Values are computed synchronously: nothing to wait for."""

    def attach_grad(self, *args, **kwargs):
        raise NotInKvtrain("NDArray.attach_grad (autograd)",
                           "train through mx.mod.Module or kvtrain's Module")

    # -- indexing -----------------------------------------------------------
    def __getitem__(self, index):
        if isinstance(index, NDArray):
            index = index._data
        if isinstance(index, (int, np.integer)) and self.ndim == 1:
            i = int(index)
            return NDArray(self._data[i:i + 1 if i != -1 else None], self._ctx)
        return NDArray(np.asarray(self._data[index]), self._ctx)

    def __setitem__(self, index, value):
        if isinstance(index, NDArray):
            index = index._data
        self._data[index] = _values(value)

    # -- arithmetic -----------------------------------------------------------
    def _new(self, values):
        values = np.asarray(values)
        if values.dtype == np.bool_:
            values = values.astype(self._data.dtype)
        elif values.dtype != self._data.dtype and values.dtype == np.float64:
            values = values.astype(self._data.dtype)  # MXNet keeps the array's dtype
        return NDArray(values, self._ctx)

    def _inplace(self, values):
        self._data[...] = values
        return self

    def __add__(self, o):
        return self._new(self._data + _values(o))

    __radd__ = __add__

    def __sub__(self, o):
        return self._new(self._data - _values(o))

    def __rsub__(self, o):
        return self._new(_values(o) - self._data)

    def __mul__(self, o):
        return self._new(self._data * _values(o))

    __rmul__ = __mul__

    def __truediv__(self, o):
        return self._new(self._data / _values(o))

    def __rtruediv__(self, o):
        return self._new(_values(o) / self._data)

    __div__, __rdiv__ = __truediv__, __rtruediv__

    def __mod__(self, o):
        return self._new(self._data % _values(o))

    def __pow__(self, o):
        return self._new(self._data ** _values(o))

    def __rpow__(self, o):
        return self._new(_values(o) ** self._data)

    def __neg__(self):
        return self._new(-self._data)

    def __abs__(self):
        return self._new(np.abs(self._data))

    def __iadd__(self, o):
        return self._inplace(self._data + _values(o))

    def __isub__(self, o):
        return self._inplace(self._data - _values(o))

    def __imul__(self, o):
        return self._inplace(self._data * _values(o))

    def __itruediv__(self, o):
        return self._inplace(self._data / _values(o))

    def __eq__(self, o):
        return self._new(self._data == _values(o))

    def __ne__(self, o):
        return self._new(self._data != _values(o))

    def __lt__(self, o):
        return self._new(self._data < _values(o))

    def __le__(self, o):
        return self._new(self._data <= _values(o))

    def __gt__(self, o):
        return self._new(self._data > _values(o))

    def __ge__(self, o):
        return self._new(self._data >= _values(o))

    __hash__ = object.__hash__

    def __bool__(self):
        if self.size != 1:
            raise ValueError("the truth value of an NDArray with %d elements is ambiguous"
                             % self.size)
        return bool(self._data.reshape(-1)[0])

    # -- reductions as methods ---------------------------------------------------
    def sum(self, axis=None, keepdims=False):
        return sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        return mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return min(self, axis=axis, keepdims=keepdims)

    def norm(self):
        return norm(self)

    def abs(self):
        return abs(self)

    def square(self):
        return square(self)

    def sqrt(self):
        return sqrt(self)

    def clip(self, a_min, a_max):
        return clip(self, a_min, a_max)


# -- creation ----------------------------------------------------------------------
def array(source_array, ctx=None, dtype=None):
    """An NDArray copied from `source_array`; dtype: an NDArray's own, else
    float32 (as MXNet: numpy float64 data becomes float32)."""
    if isinstance(source_array, NDArray):
        d = _dtype(dtype, source_array._data.dtype)
        values = source_array.asnumpy()
    else:
        d = _dtype(dtype)
        values = np.asarray(source_array)
    return NDArray(np.array(values, dtype=d, copy=True), ctx)


def empty(shape, ctx=None, dtype=None):
    return NDArray(np.empty(_shape(shape), _dtype(dtype)), ctx)


def zeros(shape, ctx=None, dtype=None, stype=None, **kwargs):
    if stype not in (None, "default"):
        from . import sparse
        return sparse.zeros(stype, shape, ctx=ctx, dtype=dtype)
    return NDArray(np.zeros(_shape(shape), _dtype(dtype)), ctx)


def ones(shape, ctx=None, dtype=None, **kwargs):
    return NDArray(np.ones(_shape(shape), _dtype(dtype)), ctx)


def full(shape, val, ctx=None, dtype=None, **kwargs):
    return NDArray(np.full(_shape(shape), val, _dtype(dtype)), ctx)


def zeros_like(a):
    return NDArray(np.zeros_like(_values(a)), a.context)


def ones_like(a):
    return NDArray(np.ones_like(_values(a)), a.context)


def arange(start, stop=None, step=1.0, repeat=1, ctx=None, dtype=None):
    values = np.arange(start, stop, step, dtype=_dtype(dtype))
    if repeat > 1:
        values = np.repeat(values, repeat)
    return NDArray(values, ctx)


def concat(*arrays, dim=1):
    return NDArray(np.concatenate([_values(a) for a in arrays], axis=dim), arrays[0].context)


def stack(*arrays, axis=0):
    return NDArray(np.stack([_values(a) for a in arrays], axis=axis), arrays[0].context)


def waitall():
    """Every operation is synchronous: nothing to wait for."""


# -- elementwise and reductions ---------------------------------------------------
def _unary(fn):
    def op(data, out=None):
        result = data._new(fn(data._data))
        return result if out is None else result.copyto(out)
    return op


abs = _unary(np.abs)  # noqa: A001 (MXNet's name)
sqrt = _unary(np.sqrt)
square = _unary(np.square)
exp = _unary(np.exp)
log = _unary(np.log)
sign = _unary(np.sign)
floor = _unary(np.floor)
ceil = _unary(np.ceil)
round = _unary(np.round)  # noqa: A001
relu = _unary(lambda x: np.maximum(x, 0))
sigmoid = _unary(lambda x: 1 / (1 + np.exp(-x)))
tanh = _unary(np.tanh)


def clip(data, a_min, a_max, out=None):
    result = data._new(np.clip(data._data, a_min, a_max))
    return result if out is None else result.copyto(out)


def _reduce(fn):
    def op(data, axis=None, keepdims=False, **kwargs):
        value = fn(_values(data), axis=axis, keepdims=keepdims)
        return data._new(np.asarray(value).reshape((1,) if np.ndim(value) == 0 else
                                                    np.shape(value)))
    return op


sum = _reduce(np.sum)  # noqa: A001
mean = _reduce(np.mean)
max = _reduce(np.max)  # noqa: A001
min = _reduce(np.min)  # noqa: A001
prod = _reduce(np.prod)


def norm(data, **kwargs):
    return data._new(np.array([np.sqrt(np.sum(np.square(_values(data), dtype=np.float64)))]))


def dot(lhs, rhs, transpose_a=False, transpose_b=False):
    a, b = _values(lhs), _values(rhs)
    return lhs._new(np.dot(a.T if transpose_a else a, b.T if transpose_b else b))


def maximum(lhs, rhs):
    base = lhs if isinstance(lhs, NDArray) else rhs
    return base._new(np.maximum(_values(lhs), _values(rhs)))


def minimum(lhs, rhs):
    base = lhs if isinstance(lhs, NDArray) else rhs
    return base._new(np.minimum(_values(lhs), _values(rhs)))


def argmax(data, axis=None, keepdims=False):
    return NDArray(np.argmax(_values(data), axis=axis).astype(data._data.dtype), data.context)


def one_hot(indices, depth, on_value=1.0, off_value=0.0, dtype=None):
    idx = _values(indices).astype(np.int64)
    out = np.full(idx.shape + (depth,), off_value, _dtype(dtype))
    np.put_along_axis(out, idx[..., None], on_value, axis=-1)
    return NDArray(out, indices.context)


def save(fname, data):
    """MXNet's binary NDArray file: an NDArray, a list of them, or a dict
    of names to them (what a .params file holds)."""
    from . import _params
    from .sparse import RowSparseNDArray

    def raw(a):
        if isinstance(a, RowSparseNDArray):
            return ("row_sparse", a._data, a._indices, a.shape)
        if isinstance(a, NDArray):
            return a._data
        raise TypeError("save: expected NDArrays, got %s" % type(a).__name__)

    if isinstance(data, NDArray):
        data = [data]
    if isinstance(data, dict):
        names = [str(k) for k in data]
        _params.save(fname, [raw(v) for v in data.values()], names)
    elif isinstance(data, (list, tuple)):
        _params.save(fname, [raw(v) for v in data], [])
    else:
        raise TypeError("save: expected an NDArray, a list or a dict, got %s"
                        % type(data).__name__)


def load(fname):
    """What mx.nd.save (or MXNet) wrote: a list of NDArrays, or a dict when
    the file names them."""
    from . import _params
    from .sparse import RowSparseNDArray

    def wrap(a):
        if a is None:
            return NDArray(np.zeros((0,), np.float32))
        if isinstance(a, tuple):
            _, rows, ids, shape = a
            return RowSparseNDArray(rows.copy(), ids, shape)
        return NDArray(a.copy())

    arrays, names = _params.load(fname)
    if names:
        return {n: wrap(a) for n, a in zip(names, arrays)}
    return [wrap(a) for a in arrays]


from . import sparse  # noqa: E402,F401  (after NDArray)
