"""mx.io: MXNet's data iterators over kvtrain's (read by the C++ core).

Batches come as DataBatch objects holding NDArrays, as in MXNet. Shuffling
iterators draw their order's seed from numpy's global generator, so
processes shuffle differently unless the script seeds it (mx.random.seed),
as with MXNet.
"""

import collections
import os

import numpy as np

import kvtrain as _kt

from .base import NotInKvtrain, missing_class
from .ndarray import NDArray


class DataDesc(collections.namedtuple("DataDesc", ["name", "shape"])):
    """A named shape (and dtype, layout), as iterators provide them."""

    def __new__(cls, name, shape, dtype=np.float32, layout="NCHW"):
        desc = super().__new__(cls, name, tuple(shape))
        desc.dtype, desc.layout = dtype, layout
        return desc

    def __repr__(self):
        return "DataDesc[%s,%s,%s,%s]" % (self.name, self.shape, np.dtype(self.dtype).name,
                                          self.layout)


class DataBatch(object):
    def __init__(self, data, label=None, pad=None, index=None, bucket_key=None,
                 provide_data=None, provide_label=None):
        self.data, self.label, self.pad, self.index = data, label, pad, index
        self.bucket_key = bucket_key
        self.provide_data, self.provide_label = provide_data, provide_label


class DataIter(object):
    """MXNet's iterator base. A Python subclass iterates in Python; fit
    needs one of the iterators below (read by the C++ trainer)."""

    def __init__(self, batch_size=0):
        self.batch_size = batch_size

    def __iter__(self):
        return self

    def reset(self):
        pass

    def __next__(self):
        return self.next()

    def next(self):
        raise StopIteration


class _Wrapped(DataIter):
    """One of kvtrain's iterators, yielding MXNet DataBatches."""

    def __init__(self, inner):
        super().__init__(inner.batch_size)
        self._inner = inner
        self._handle = inner._handle

    @property
    def provide_data(self):
        return [DataDesc(n, s) for n, s in self._inner.provide_data]

    @property
    def provide_label(self):
        return [DataDesc(n, s) for n, s in self._inner.provide_label]

    def reset(self):
        self._inner.reset()

    def next(self):
        b = self._inner.next_batch()
        if b is None:
            raise StopIteration
        return DataBatch([NDArray(d) for d in b.data], [NDArray(l) for l in b.label], b.pad,
                         provide_data=self.provide_data, provide_label=self.provide_label)


def _np(x):
    if isinstance(x, NDArray):
        return x.asnumpy()
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], NDArray):
        return [a.asnumpy() for a in x]
    if isinstance(x, dict):
        return {k: _np(v) for k, v in x.items()}
    return x


class NDArrayIter(_Wrapped):
    def __init__(self, data, label=None, batch_size=1, shuffle=False, last_batch_handle="pad",
                 data_name="data", label_name="softmax_label"):
        if label is None:
            raise NotInKvtrain("NDArrayIter without labels",
                               "give labels (zeros for prediction)")
        if isinstance(label, dict):
            label_name, label = next(iter(label.items()))
        if isinstance(label, (list, tuple)):
            if len(label) != 1:
                raise NotInKvtrain("NDArrayIter with %d label arrays" % len(label),
                                   "kvtrain trains one data and one label input")
            label = label[0]
        seed = int(np.random.randint(1 << 31)) if shuffle else 0
        super().__init__(_kt.io.NDArrayIter(
            _np(data), _np(label), batch_size=batch_size, shuffle=shuffle,
            last_batch_handle=last_batch_handle, seed=seed, data_name=data_name,
            label_name=label_name))


class CSVIter(_Wrapped):
    """MXNet's CSVIter: data_csv's lines are examples of data_shape,
    label_csv's (optional) their labels, one value each."""

    def __init__(self, data_csv, data_shape, label_csv=None, label_shape=(1,), batch_size=1,
                 round_batch=True, prefetch_buffer=4, dtype=None, data_name="data",
                 label_name="softmax_label", num_parts=1, part_index=0, **kwargs):
        if tuple(label_shape) != (1,):
            raise NotInKvtrain("CSVIter label_shape %s" % (tuple(label_shape),),
                               "kvtrain trains with one label value per example")
        if not round_batch:
            raise NotInKvtrain("CSVIter(round_batch=False)",
                               "the last batch is filled from the part's start")
        if dtype not in (None, "float32", np.float32):
            raise NotInKvtrain("CSVIter dtype %s" % (dtype,), "CSV values are read as float32")
        if kwargs:
            raise NotInKvtrain("CSVIter(%s)" % ", ".join(sorted(kwargs)), "see docs/mxnet.md")
        super().__init__(_kt.io.CSVIter(data_csv, data_shape, label_csv, batch_size=batch_size,
                                        num_parts=num_parts, part_index=part_index,
                                        data_name=data_name, label_name=label_name))


class MNISTIter(_Wrapped):
    """MXNet's MNISTIter: image= and label= name MNIST-format files (the
    train- or t10k- pair of one directory, .gz or not)."""

    def __init__(self, image="./train-images-idx3-ubyte", label="./train-labels-idx1-ubyte",
                 batch_size=128, shuffle=True, flat=False, seed=0, silent=False,
                 num_parts=1, part_index=0, data_shape=None, label_name="softmax_label",
                 data_name="data", **kwargs):
        base = os.path.basename(image)
        if base.startswith("train-images"):
            train = True
        elif base.startswith("t10k-images"):
            train = False
        else:
            raise ValueError("MNISTIter: image %r: expected train-images-idx3-ubyte or "
                             "t10k-images-idx3-ubyte (optionally .gz)" % (image,))
        want = ("train" if train else "t10k") + "-labels"
        if not os.path.basename(label).startswith(want) or (
                os.path.dirname(os.path.abspath(label)) != os.path.dirname(os.path.abspath(image))):
            raise ValueError("MNISTIter: label %r must be the %s-idx1-ubyte beside %r"
                             % (label, want, image))
        if data_shape is not None and tuple(data_shape) not in ((784,), (1, 28, 28)):
            raise ValueError("MNISTIter: data_shape %r: expected (784,) or (1, 28, 28)"
                             % (data_shape,))
        if data_shape is not None:
            flat = tuple(data_shape) == (784,)
        super().__init__(_kt.io.MNISTIter(
            data_dir=os.path.dirname(os.path.abspath(image)), train=train,
            batch_size=batch_size, shuffle=shuffle, flat=flat, seed=seed,
            num_parts=num_parts, part_index=part_index, data_name=data_name,
            label_name=label_name))


class ResizeIter(DataIter):
    """`size` batches per epoch of `data_iter`, wrapping around its end (as
    MXNet's; the C++ trainer then runs exactly `size` steps)."""

    def __init__(self, data_iter, size, reset_internal=True):
        if not hasattr(data_iter, "_handle"):
            raise NotInKvtrain("ResizeIter over a Python iterator",
                               "wrap an NDArrayIter or MNISTIter")
        super().__init__(data_iter.batch_size)
        self.data_iter, self.size = data_iter, int(size)
        self._handle = data_iter._handle
        self._count = 0

    @property
    def provide_data(self):
        return self.data_iter.provide_data

    @property
    def provide_label(self):
        return self.data_iter.provide_label

    def reset(self):
        self._count = 0
        self.data_iter.reset()

    def next(self):
        if self._count == self.size:
            raise StopIteration
        try:
            batch = self.data_iter.next()
        except StopIteration:
            self.data_iter.reset()
            batch = self.data_iter.next()
        self._count += 1
        return batch


ImageRecordIter = missing_class("mx.io.ImageRecordIter",
                                "decode the images into numpy and use NDArrayIter", DataIter)
LibSVMIter = missing_class("mx.io.LibSVMIter", "kvtrain's C++ examples read LibSVM (train_ctr)",
                           DataIter)
PrefetchingIter = missing_class("mx.io.PrefetchingIter", "kvtrain's iterators prefetch already",
                                DataIter)
ImageDetRecordIter = missing_class("mx.io.ImageDetRecordIter", "use NDArrayIter", DataIter)
