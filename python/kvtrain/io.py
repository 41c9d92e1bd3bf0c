"""kvtrain.io: data iterators (MXNet's mx.io), run by the C++ core.

    train = kvtrain.io.NDArrayIter(x, y, batch_size=100, shuffle=True,
                                   num_parts=kv.num_workers, part_index=kv.rank)
    test = kvtrain.io.MNISTIter(train=False, batch_size=100)

Any data loaded into numpy trains: NDArrayIter reads float32 arrays in place
(other dtypes are converted once, here) with labels of any numeric dtype.
Parts: chunk i of every epoch's (shuffled) order goes to part i mod
num_parts, so n workers at batch b see what one process at n x b sees.
"""

import os

import numpy as np

from . import _lib

DEFAULT_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


class DataBatch(object):
    """One batch: data and label (lists of one numpy array each, as in
    MXNet) and `pad`, the trailing rows that repeat earlier examples."""

    def __init__(self, data, label, pad=0):
        self.data, self.label, self.pad = data, label, pad


class DataIter(object):
    """An iterator over one epoch at a time; reset() starts the next."""

    def __init__(self, handle, data_name="data", label_name="softmax_label"):
        self._handle = handle
        self.data_name, self.label_name = data_name, label_name

    @property
    def batch_size(self):
        return self._handle.batch_size

    @property
    def provide_data(self):
        return [(self.data_name, tuple(self._handle.data_shape))]

    @property
    def provide_label(self):
        return [(self.label_name, (self._handle.batch_size,))]

    @property
    def num_batches(self):
        """Batches per epoch in this part."""
        return self._handle.num_batches

    @property
    def max_part_batches(self):
        """The most batches any part has: the steps every worker of a
        synchronous job takes per epoch."""
        return self._handle.max_part_batches

    def reset(self):
        """Starts the next epoch (reshuffled when shuffling)."""
        self._handle.reset()

    def start_epoch(self, epoch):
        """Starts epoch `epoch` (0-based) from its beginning: its order
        depends only on the seed and the epoch, so a resumed job reads what
        an uninterrupted one would."""
        self._handle.start_epoch(int(epoch))

    def next_batch(self):
        """The next DataBatch of the epoch, or None at its end."""
        b = self._handle.next()
        return None if b is None else DataBatch([b[0]], [b[1]], b[2])

    def __iter__(self):
        return self

    def __next__(self):
        b = self._handle.next()
        if b is None:
            raise StopIteration
        return DataBatch([b[0]], [b[1]], b[2])

    next = __next__


def _parts(num_parts, part_index):
    if int(num_parts) < 1 or not 0 <= int(part_index) < int(num_parts):
        raise ValueError("part_index=%r, num_parts=%r: expected 0 <= part_index < num_parts"
                         % (part_index, num_parts))
    return int(num_parts), int(part_index)


class NDArrayIter(DataIter):
    """Batches of rows of numpy `data` ((N, ...)) and `label` ((N,)).
    last_batch_handle: 'pad' (fill the last batch from the part's start) or
    'discard'. `seed` fixes the shuffle (the same on every worker)."""

    def __init__(self, data, label, batch_size=1, shuffle=False, last_batch_handle="pad",
                 num_parts=1, part_index=0, seed=0, data_name="data",
                 label_name="softmax_label"):
        if isinstance(data, (list, tuple)):
            if len(data) != 1:
                raise ValueError("NDArrayIter: one data array is supported, got %d" % len(data))
            data = data[0]
        if isinstance(data, dict):
            data_name, data = next(iter(data.items()))
        if label is None:
            raise ValueError("NDArrayIter: label is required")
        data = np.asarray(data)
        if data.dtype not in (np.float32, np.uint8):
            data = data.astype(np.float32)  # once, here: the iterator reads it in place
        data = np.ascontiguousarray(data)
        label = np.ascontiguousarray(np.asarray(label))
        if label.dtype.kind not in "fiu":
            raise TypeError("NDArrayIter: labels must be numbers, got %s" % label.dtype)
        if label.dtype not in (np.float32, np.float64, np.int32, np.int64, np.uint8):
            label = label.astype(np.float32)
        if data.ndim < 1 or label.shape != (data.shape[0],):
            raise ValueError("NDArrayIter: data %s and label %s: expected label of shape (%d,)"
                             % (data.shape, label.shape, data.shape[0] if data.ndim else 0))
        if last_batch_handle == "roll_over":
            raise ValueError("NDArrayIter: last_batch_handle='roll_over' is not supported "
                             "(pad or discard)")
        num_parts, part_index = _parts(num_parts, part_index)
        handle = _lib.DataIter.from_arrays(
            data, label, batch_size=int(batch_size), shuffle=bool(shuffle), seed=int(seed),
            last_batch_handle=last_batch_handle, num_parts=num_parts, part_index=part_index,
            prefetch=True)
        super(NDArrayIter, self).__init__(handle, data_name, label_name)


class MNISTIter(DataIter):
    """An MNIST-format directory (train-images-idx3-ubyte[.gz], ... or t10k-*
    for train=False), pixels scaled to [0, 1]; flat=True gives (batch, 784),
    False (batch, 1, 28, 28). The default is Debian's Fashion-MNIST."""

    def __init__(self, data_dir=DEFAULT_MNIST_DIR, train=True, batch_size=100, shuffle=False,
                 flat=True, num_parts=1, part_index=0, seed=0, num_examples=0,
                 last_batch_handle="pad", data_name="data", label_name="softmax_label"):
        if not os.path.isdir(data_dir):
            raise ValueError("MNISTIter: data_dir %r is not a directory" % (data_dir,))
        num_parts, part_index = _parts(num_parts, part_index)
        handle = _lib.DataIter.mnist(
            data_dir, train=bool(train), batch_size=int(batch_size), shuffle=bool(shuffle),
            seed=int(seed), flat=bool(flat), last_batch_handle=last_batch_handle,
            num_parts=num_parts, part_index=part_index, num_examples=int(num_examples),
            prefetch=True)
        super(MNISTIter, self).__init__(handle, data_name, label_name)


class CSVIter(DataIter):
    """MXNet's CSVIter: each line of `data_csv` one example of `data_shape`
    (its values comma-separated, flattened), the labels one per line of
    `label_csv` (None: zeros). Read and checked whole when made (an error
    names the file, line and column); batched as NDArrayIter's."""

    def __init__(self, data_csv, data_shape, label_csv=None, batch_size=1, shuffle=False,
                 last_batch_handle="pad", num_parts=1, part_index=0, seed=0, data_name="data",
                 label_name="softmax_label"):
        num_parts, part_index = _parts(num_parts, part_index)
        handle = _lib.DataIter.csv(
            str(data_csv), tuple(int(d) for d in data_shape), str(label_csv or ""),
            batch_size=int(batch_size), shuffle=bool(shuffle), seed=int(seed),
            last_batch_handle=last_batch_handle, num_parts=num_parts, part_index=part_index,
            prefetch=True)
        super(CSVIter, self).__init__(handle, data_name, label_name)


def _float32(x):
    x = x.asnumpy() if hasattr(x, "asnumpy") else np.asarray(x)
    return np.ascontiguousarray(x, dtype=np.float32)


class _Source(object):
    """What the C++ trainer reads from a Python iterator (DataIter.from_python)."""

    def __init__(self, it, batch_size, data_shape):
        self._it, self.batch_size, self.data_shape = it, batch_size, data_shape

    def reset(self):
        self._it.reset()

    def next_arrays(self):
        try:
            b = self._it.next() if hasattr(self._it, "next") else next(self._it)
        except StopIteration:
            return None
        data = _float32(b.data[0] if isinstance(b.data, (list, tuple)) else b.data)
        label = b.label[0] if isinstance(b.label, (list, tuple)) and b.label else b.label
        label = (np.zeros((self.batch_size,), np.float32) if label is None or
                 (isinstance(label, (list, tuple)) and not label) else _float32(label))
        return data, label, int(b.pad or 0)


def _desc(desc, what):
    """(name, shape) of a provide_data / provide_label entry (a DataDesc or a pair)."""
    if hasattr(desc, "name") and hasattr(desc, "shape"):
        return desc.name, tuple(int(d) for d in desc.shape)
    try:
        name, shape = desc
        return name, tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise TypeError("%s: expected (name, shape) or a DataDesc, got %r" % (what, desc))


class PythonIter(DataIter):
    """Any Python iterator, for the C++ trainer (fit, score, predict): one
    with provide_data (and provide_label), reset() and next() (or
    __next__) giving batches with .data, .label and .pad (numpy arrays, or
    anything with asnumpy(), such as MXNet's NDArrays), as an MXNet DataIter
    subclass is. An epoch ends where it raises StopIteration, so its length
    need not be known; under a synchronous dist store every worker's
    iterator must then give the same number of batches per epoch (as with
    MXNet), or be cut to one length by fit's epoch_size (mx.io.ResizeIter).
    The trainer calls reset() as each epoch starts and takes a copy of each
    batch, on its own thread, holding the GIL while the iterator runs."""

    def __init__(self, source):
        provide = list(getattr(source, "provide_data", None) or [])
        if len(provide) != 1:
            raise TypeError("PythonIter: %s must provide one data input (provide_data), got %r"
                            % (type(source).__name__, provide))
        data_name, shape = _desc(provide[0], "provide_data")
        labels = list(getattr(source, "provide_label", None) or [])
        label_name = _desc(labels[0], "provide_label")[0] if labels else "softmax_label"
        self.source = source
        super(PythonIter, self).__init__(
            _lib.DataIter.from_python(_Source(source, shape[0], shape)), data_name, label_name)


def as_iter(data, what="data"):
    """`data` as an iterator the C++ core reads: kvtrain's own as they are,
    a Python one (an MXNet DataIter subclass, ...) through PythonIter."""
    if data is None or hasattr(data, "_handle"):
        return data
    if hasattr(data, "provide_data") and (hasattr(data, "next") or hasattr(data, "__next__")):
        return PythonIter(data)
    raise TypeError("%s must be a kvtrain.io iterator or a Python one with provide_data, "
                    "reset() and next(); got %s" % (what, type(data).__name__))
