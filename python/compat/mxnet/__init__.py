"""MXNet 1.x's Python API over kvtrain, for scripts written for MXNet.

Opt in by putting this folder's parent on PYTHONPATH:

    export PYTHONPATH=/path/to/kvtrain/python/compat:/path/to/kvtrain/python
    python my_mxnet_script.py          # its `import mxnet as mx` is kvtrain

It is never installed over a real MXNet. What works, what differs and what
is missing is listed in docs/mxnet.md; a call this face does not have
raises an error that names it, never a silent no-op.
"""

import os as _os
import sys as _sys

try:
    import kvtrain as _kvtrain  # noqa: F401
except ImportError:  # python/compat/mxnet -> python/
    _sys.path.insert(0, _os.path.dirname(_os.path.dirname(
        _os.path.dirname(_os.path.abspath(__file__)))))
    import kvtrain as _kvtrain  # noqa: F401

from .base import MXNetError, NotInKvtrain  # noqa: E402,F401
from .context import Context, cpu, gpu, current_context, num_gpus  # noqa: E402,F401
from . import ndarray  # noqa: E402
from . import ndarray as nd  # noqa: E402,F401
from . import kvstore  # noqa: E402
from . import kvstore as kv  # noqa: E402,F401
from . import optimizer  # noqa: E402,F401
from . import random  # noqa: E402,F401
from . import test_utils  # noqa: E402,F401
from . import symbol  # noqa: E402
from . import symbol as sym  # noqa: E402,F401
from . import initializer  # noqa: E402
from . import initializer as init  # noqa: E402,F401
from . import lr_scheduler  # noqa: E402,F401
from . import io  # noqa: E402,F401
from . import metric  # noqa: E402,F401
from . import callback  # noqa: E402,F401
from . import monitor  # noqa: E402
from . import monitor as mon  # noqa: E402,F401
from . import module  # noqa: E402
from . import module as mod  # noqa: E402,F401
from . import model  # noqa: E402,F401

# MXNet packages this face does not have: named when a script reaches them.
_NOT_HERE = {
    "gluon": "train through mx.mod.Module, or kvtrain.torch for PyTorch models",
    "autograd": "train through mx.mod.Module",
    "profiler": "KVTRAIN_TRACE writes a trace of every operator and message",
    "image": "decode images into numpy and use mx.io.NDArrayIter",
    "recordio": "decode records into numpy and use mx.io.NDArrayIter",
    "rnn": "kvtrain has no recurrent operators",
    "contrib": "kvtrain's operators are listed in docs/operators.md",
    "np": "use mx.nd (MXNet's numpy mode is not here)",
    "npx": "use mx.nd (MXNet's numpy mode is not here)",
    "amp": "kvtrain trains in float32; fp16 compresses gradients (docs/kvstore.md)",
}


def __getattr__(name):
    if name in _NOT_HERE:
        raise NotInKvtrain("mx.%s" % name, _NOT_HERE[name])
    raise AttributeError("module 'mxnet' has no attribute %r" % (name,))

__version__ = "1.9.1"
# Which framework this is, for scripts that must know.
__kvtrain__ = True
