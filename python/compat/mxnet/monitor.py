"""mx.mon: MXNet's Monitor (per-batch statistics of every array)."""

from .base import NotInKvtrain


class Monitor(object):
    def __init__(self, interval, stat_func=None, pattern=".*", sort=False, **kwargs):
        raise NotInKvtrain("mx.mon.Monitor",
                           "kvtrain's trainer writes per-batch losses with metrics_file= "
                           "and KVTRAIN_TRACE traces every operator (docs/training.md)")
