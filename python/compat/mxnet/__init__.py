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

__version__ = "1.9.1"
# Which framework this is, for scripts that must know.
__kvtrain__ = True
