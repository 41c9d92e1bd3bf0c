"""What the package's modules share: the end of a distributed job.

A dist worker's store must leave the job with Finalize when the script ends
well, and must fail the whole job at once when it ends with an exception (as
the C++ trainer does), so that no other process waits for it. kvtrain does
both at interpreter exit for every store the script did not close itself.
"""

import atexit
import sys
import traceback

# Strong references: a dist worker's store that is garbage-collected
# without Finalize would fail the whole job, so they live until exit.
_stores = []
_failure = []


def track(store):
    """Registers a dist store (kvtrain.kv.KVStore) for the exit rules."""
    _stores.append(store)


def _excepthook(kind, value, tb):
    if not issubclass(kind, SystemExit):
        _failure.append("".join(traceback.format_exception_only(kind, value)).strip())
    _previous_hook(kind, value, tb)


def _at_exit():
    for store in list(_stores):
        handle = store._handle
        if handle.finished:
            continue
        if _failure:
            handle.abort("%s %d failed: %s" % (handle.role, handle.rank, _failure[0]))
        else:
            try:
                handle.finalize()
            except Exception as e:  # noqa: BLE001 (reported, exit goes on)
                sys.stderr.write("kvtrain: leaving the job failed: %s\n" % e)
    del _stores[:]


_previous_hook = sys.excepthook
sys.excepthook = _excepthook
atexit.register(_at_exit)
