"""mx.test_utils: the assertions MXNet's tests and examples use."""

import numpy as np

from .context import current_context
from .ndarray import NDArray


def _np(a):
    return a.asnumpy() if isinstance(a, NDArray) else np.asarray(a)


def default_context():
    return current_context()


def _tolerances(a, b, rtol, atol):
    low = min(np.dtype(a.dtype).itemsize if a.dtype.kind == "f" else 8,
              np.dtype(b.dtype).itemsize if b.dtype.kind == "f" else 8)
    default = {2: (1e-2, 1e-4), 4: (1e-4, 1e-5)}.get(low, (1e-5, 1e-20))
    return (default[0] if rtol is None else rtol, default[1] if atol is None else atol)


def almost_equal(a, b, rtol=None, atol=None, equal_nan=False):
    a, b = _np(a), _np(b)
    rtol, atol = _tolerances(a, b, rtol, atol)
    return np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def assert_almost_equal(a, b, rtol=None, atol=None, names=("a", "b"), equal_nan=False,
                        **kwargs):
    """Raises AssertionError naming the worst element when a and b differ
    beyond atol + rtol * |b| (defaults by the lower-precision dtype)."""
    a, b = _np(a), _np(b)
    rtol, atol = _tolerances(a, b, rtol, atol)
    if a.shape != b.shape and a.size != 1 and b.size != 1:
        raise AssertionError("%s has shape %s, %s has shape %s"
                             % (names[0], a.shape, names[1], b.shape))
    if np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan):
        return
    x, y = np.broadcast_arrays(a.astype(np.float64), b.astype(np.float64))
    err = np.abs(x - y) - (atol + rtol * np.abs(y))
    worst = np.unravel_index(np.nanargmax(err), err.shape) if err.size else ()
    raise AssertionError("%s and %s differ beyond rtol=%g atol=%g: at %s %r vs %r"
                         % (names[0], names[1], rtol, atol, worst, x[worst], y[worst]))


def same(a, b):
    return np.array_equal(_np(a), _np(b))


def assert_exception(f, exception_type, *args, **kwargs):
    """f(*args, **kwargs) must raise exception_type."""
    try:
        f(*args, **kwargs)
    except exception_type:
        return
    raise AssertionError("%s did not raise %s" % (getattr(f, "__name__", f),
                                                   exception_type.__name__))


# Where get_mnist reads: Debian's Fashion-MNIST (the same idx files as MNIST,
# offline); MXNET_MNIST_DIR points elsewhere.
MNIST_DIR = "/usr/share/datasets/fashion-mnist"


def _read_idx(path):
    import gzip
    import struct
    with gzip.open(path) as f:
        magic = struct.unpack(">I", f.read(4))[0]
        ndim = magic & 0xFF
        dims = struct.unpack(">%dI" % ndim, f.read(4 * ndim))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def get_mnist(path=None):
    """{'train_data', 'train_label', 'test_data', 'test_label'} as MXNet's:
    images (N, 1, 28, 28) float32 in [0, 1], labels (N,) float32. Read from
    the bundled Fashion-MNIST (MXNET_MNIST_DIR, or `path`, for others);
    nothing is downloaded."""
    import os
    path = path or os.environ.get("MXNET_MNIST_DIR", MNIST_DIR)
    if not os.path.isdir(path) or not os.path.exists(
            os.path.join(path, "train-images-idx3-ubyte.gz")):
        raise FileNotFoundError("get_mnist: no MNIST idx files (train-images-idx3-ubyte.gz, "
                                "...) in %s; kvtrain does not download" % path)
    out = {}
    for part, prefix in (("train", "train"), ("test", "t10k")):
        images = _read_idx(os.path.join(path, "%s-images-idx3-ubyte.gz" % prefix))
        labels = _read_idx(os.path.join(path, "%s-labels-idx1-ubyte.gz" % prefix))
        out[part + "_data"] = images.reshape(-1, 1, 28, 28).astype(np.float32) / 255
        out[part + "_label"] = labels.astype(np.float32)
    return out


def get_mnist_iterator(batch_size, input_shape, num_parts=1, part_index=0):
    """(train, val) MNISTIters of the bundled data, as MXNet's helper."""
    import os
    from . import io
    path = os.environ.get("MXNET_MNIST_DIR", MNIST_DIR)
    flat = len(input_shape) == 1
    train = io.MNISTIter(image=os.path.join(path, "train-images-idx3-ubyte.gz"),
                         label=os.path.join(path, "train-labels-idx1-ubyte.gz"),
                         batch_size=batch_size, shuffle=True, flat=flat,
                         num_parts=num_parts, part_index=part_index)
    val = io.MNISTIter(image=os.path.join(path, "t10k-images-idx3-ubyte.gz"),
                       label=os.path.join(path, "t10k-labels-idx1-ubyte.gz"),
                       batch_size=batch_size, shuffle=False, flat=flat)
    return train, val
