"""Checkpoint files (the C++ trainer's): prefix-symbol.txt, prefix-NNNN.params
and, when saved with the optimizer, prefix-NNNN.states."""

from . import _lib
from . import symbol as _sym


def save_checkpoint(prefix, epoch, symbol, arg_params, aux_params):
    """Writes prefix-symbol.txt and prefix-NNNN.params (atomically)."""
    symbol.save(_lib.symbol_path(prefix))
    _lib.save_params(_lib.params_path(prefix, int(epoch)), arg_params, aux_params, int(epoch))


def load_checkpoint(prefix, epoch):
    """(symbol, arg_params, aux_params) of prefix's checkpoint of `epoch`."""
    sym = _sym.load(_lib.symbol_path(prefix))
    args, aux, saved = _lib.load_params(_lib.params_path(prefix, int(epoch)))
    if saved != int(epoch):
        raise _lib.KVTrainError("%s holds the arrays of epoch %d, not %d"
                                % (_lib.params_path(prefix, int(epoch)), saved, int(epoch)))
    return sym, args, aux


def load_params(fname):
    """(arg_params, aux_params) of a params file."""
    args, aux, _ = _lib.load_params(fname)
    return args, aux
