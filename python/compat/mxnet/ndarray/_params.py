"""MXNet's binary NDArray file (what mx.nd.save writes and a `.params` file
is): a list header (0x112, a reserved 0, the arrays, then their names, none
for a list), and each array in MXNet's version-2 layout: a magic number,
the storage type, the shape (int32 ndim, int64 dims), the context
(int32 device type and id), the dtype flag, the values (and for a
row-sparse array its row ids after them). Little-endian, as MXNet writes it
on every platform it ran on. Reads versions 1 and 2 and MXNet's oldest
layout (uint32 dims); writes version 2, which every MXNet 1.x reads."""

import os
import struct

import numpy as np

LIST_MAGIC = 0x112
V1_MAGIC = 0xF993FAC8
V2_MAGIC = 0xF993FAC9
V3_MAGIC = 0xF993FACA  # MXNet 2's numpy shapes
DENSE, ROW_SPARSE, CSR = 0, 1, 2
# mshadow's dtype flags.
FLAGS = {0: np.float32, 1: np.float64, 2: np.float16, 3: np.uint8, 4: np.int32, 5: np.int8,
         6: np.int64, 7: np.bool_}
FLAG_OF = {np.dtype(t): f for f, t in FLAGS.items()}
CPU = 1


class FormatError(ValueError):
    pass


class _Reader(object):
    def __init__(self, data, name):
        self.data, self.pos, self.name = data, 0, name

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.data):
            raise FormatError("%s: %s at byte %d runs past the end (%d bytes)"
                              % (self.name, what, self.pos, len(self.data)))
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt, what):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def shape(self, what):
        (ndim,) = self.unpack("i", what + " ndim")
        if ndim < 0 or ndim > 32:
            raise FormatError("%s: %s has %d dimensions at byte %d"
                              % (self.name, what, ndim, self.pos - 4))
        dims = self.unpack("%dq" % ndim, what) if ndim else ()
        if any(d < 0 for d in dims):
            raise FormatError("%s: %s %s has a negative dimension" % (self.name, what, dims))
        return tuple(dims)


def _values(r, shape, flag, what):
    if flag not in FLAGS:
        raise FormatError("%s: %s has dtype flag %d, not one MXNet writes" % (r.name, what, flag))
    dtype = np.dtype(FLAGS[flag])
    count = int(np.prod(shape)) if shape else 1
    raw = r.take(count * dtype.itemsize, what + " values")
    return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)


def _read_array(r, index):
    what = "array %d" % index
    (magic,) = r.unpack("I", what + " magic")
    if magic == V3_MAGIC:
        raise FormatError("%s: %s was saved by MXNet 2 in numpy shape mode, which this face "
                          "does not read" % (r.name, what))
    stype = DENSE
    if magic == V2_MAGIC:
        (stype,) = r.unpack("i", what + " storage type")
        if stype not in (DENSE, ROW_SPARSE, CSR):
            raise FormatError("%s: %s has storage type %d" % (r.name, what, stype))
        if stype == CSR:
            raise FormatError("%s: %s is a CSR array; kvtrain has dense and row-sparse ones"
                              % (r.name, what))
        storage = r.shape(what + " storage shape") if stype == ROW_SPARSE else None
        shape = r.shape(what + " shape")
    elif magic == V1_MAGIC:
        shape = r.shape(what + " shape")
    else:  # the oldest layout: the magic is ndim, dims are uint32
        if magic > 32:
            raise FormatError("%s: %s starts with 0x%x, not an NDArray" % (r.name, what, magic))
        shape = r.unpack("%dI" % magic, what + " shape") if magic else ()
    if not shape:
        return None  # MXNet's empty (none) array
    r.unpack("ii", what + " context")
    (flag,) = r.unpack("i", what + " dtype")
    if stype == ROW_SPARSE:
        (aux_flag,) = r.unpack("i", what + " row id dtype")
        aux_shape = r.shape(what + " row id shape")
        data = _values(r, storage, flag, what)
        ids = _values(r, aux_shape, aux_flag, what + " row ids").astype(np.int64)
        return ("row_sparse", data, ids, shape)
    return _values(r, shape, flag, what)


def load(path):
    """(arrays, names) of an MXNet NDArray file; names is [] for a list.
    Each array is a numpy array, a ("row_sparse", rows, ids, shape) tuple,
    or None (MXNet's empty array)."""
    with open(path, "rb") as f:
        r = _Reader(f.read(), path)
    magic, _ = r.unpack("QQ", "header")
    if magic != LIST_MAGIC:
        raise FormatError("%s: starts with 0x%x, not MXNet's NDArray list magic 0x112"
                          % (path, magic))
    (count,) = r.unpack("Q", "array count")
    if count > len(r.data):
        raise FormatError("%s: says %d arrays in %d bytes" % (path, count, len(r.data)))
    arrays = [_read_array(r, i) for i in range(count)]
    (nnames,) = r.unpack("Q", "name count")
    if nnames not in (0, count):
        raise FormatError("%s: %d names for %d arrays" % (path, nnames, count))
    names = []
    for i in range(nnames):
        (n,) = r.unpack("Q", "name %d length" % i)
        names.append(r.take(n, "name %d" % i).decode("utf-8"))
    if r.pos != len(r.data):
        raise FormatError("%s: %d bytes after the last name" % (path, len(r.data) - r.pos))
    return arrays, names


def _shape_bytes(shape):
    return struct.pack("<i%dq" % len(shape), len(shape), *shape)


def _write_array(out, a):
    """`a`: a numpy array or a ("row_sparse", rows, ids, shape) tuple."""
    if isinstance(a, tuple):
        _, rows, ids, shape = a
        rows = np.ascontiguousarray(rows)
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        out += struct.pack("<Ii", V2_MAGIC, ROW_SPARSE) + _shape_bytes(rows.shape)
        out += _shape_bytes(tuple(shape)) + struct.pack("<iii", CPU, 0, FLAG_OF[rows.dtype])
        out += struct.pack("<i", FLAG_OF[ids.dtype]) + _shape_bytes(ids.shape)
        out += rows.astype(rows.dtype.newbyteorder("<")).tobytes()
        out += ids.astype("<i8").tobytes()
        return
    a = np.ascontiguousarray(a)
    if a.dtype not in FLAG_OF:
        raise TypeError("MXNet's format has no dtype %s" % a.dtype)
    if a.ndim == 0:
        a = a.reshape(1)
    out += struct.pack("<Ii", V2_MAGIC, DENSE) + _shape_bytes(a.shape)
    out += struct.pack("<iii", CPU, 0, FLAG_OF[a.dtype])
    out += a.astype(a.dtype.newbyteorder("<")).tobytes()


def save(path, arrays, names):
    out = bytearray(struct.pack("<QQQ", LIST_MAGIC, 0, len(arrays)))
    for a in arrays:
        _write_array(out, a)
    out += struct.pack("<Q", len(names))
    for n in names:
        b = n.encode("utf-8")
        out += struct.pack("<Q", len(b)) + b
    tmp = "%s.tmp" % path
    with open(tmp, "wb") as f:
        f.write(out)
    os.replace(tmp, path)
