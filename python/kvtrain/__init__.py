"""kvtrain: parameter-server and all-reduce training, driven from Python.

The engine is kvtrain's C++ core (the extension module ``kvtrain._kvtrain``,
built with ``bazel build //python:kvtrain``); this package gives it MXNet
1.x's shape::

    import kvtrain as kt
    kv = kt.kv.create('dist_sync')
    net = kt.sym.FullyConnected(kt.sym.Variable('data'), num_hidden=10, name='fc')
    mod = kt.mod.Module(kt.sym.SoftmaxOutput(net, name='softmax'))
    mod.fit(kt.io.NDArrayIter(x, y, batch_size=100), kvstore=kv, num_epoch=5)

See docs/python.md.
"""

import os as _os
import sys as _sys

_BUILT_FOR = (3, 11)


def _load_extension():
    if _sys.version_info[:2] != _BUILT_FOR:
        raise ImportError(
            "kvtrain's extension is built for Debian's /usr/bin/python3 (Python %d.%d); "
            "this is Python %d.%d at %s: run the script with /usr/bin/python3"
            % (_BUILT_FOR + _sys.version_info[:2] + (_sys.executable,)))
    try:
        import numpy  # noqa: F401 (the extension's arrays)
    except ImportError:
        raise ImportError(
            "kvtrain needs numpy, which %s (Python %d.%d) does not have: run the script "
            "with Debian's /usr/bin/python3 (python3-numpy)"
            % ((_sys.executable,) + _sys.version_info[:2]))
    here = _os.path.dirname(_os.path.abspath(__file__))
    if not _os.path.exists(_os.path.join(here, "_kvtrain.so")):
        # A source checkout: the extension is under bazel-bin/.
        root = _os.path.dirname(_os.path.dirname(here))
        built = _os.path.join(root, "bazel-bin", "python", "kvtrain")
        if not _os.path.exists(_os.path.join(built, "_kvtrain.so")):
            raise ImportError(
                "kvtrain's extension _kvtrain.so is not built: run "
                "`bazel build //python:kvtrain` in %s (or copy the package with "
                "tools/python_package.sh)" % root)
        __path__.append(built)  # noqa: F821 (the package's own __path__)
    from . import _kvtrain
    return _kvtrain


_lib = _load_extension()

KVTrainError = _lib.KVTrainError
KVTrainValueError = _lib.KVTrainValueError


class Context(object):
    """A device: ``kvtrain.cpu()`` or ``kvtrain.gpu(0)``."""

    def __init__(self, device_type, device_id=0):
        if device_type not in ("cpu", "gpu"):
            raise ValueError("device type %r: expected 'cpu' or 'gpu'" % (device_type,))
        self.device_type = device_type
        self.device_id = int(device_id)

    def __repr__(self):
        return "%s(%d)" % (self.device_type, self.device_id)

    def __eq__(self, other):
        return (isinstance(other, Context) and other.device_type == self.device_type
                and other.device_id == self.device_id)

    def __hash__(self):
        return hash((self.device_type, self.device_id))


def cpu(device_id=0):
    return Context("cpu", device_id)


def gpu(device_id=0):
    return Context("gpu", device_id)


def num_gpus():
    """GPUs this build and machine offer (0 without CUDA)."""
    return _lib.num_gpus()


from . import base  # noqa: E402  (after the extension is loaded)
from . import callback  # noqa: E402
from . import initializer  # noqa: E402
from . import io  # noqa: E402
from . import kvstore  # noqa: E402
from . import lr_scheduler  # noqa: E402
from . import model  # noqa: E402
from . import module  # noqa: E402
from . import optimizer  # noqa: E402
from . import sparse  # noqa: E402
from . import symbol  # noqa: E402

kv = kvstore
sym = symbol
mod = module
init = initializer

__all__ = ["KVTrainError", "KVTrainValueError", "Context", "cpu", "gpu", "num_gpus",
           "callback", "init", "initializer", "io", "kv", "kvstore", "lr_scheduler",
           "model", "mod", "module", "optimizer", "sym", "symbol"]
