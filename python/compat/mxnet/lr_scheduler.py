"""mx.lr_scheduler: MXNet's schedules, applied by kvtrain's optimizer
wherever it runs (on the servers for dist stores). As in MXNet the
optimizer's learning_rate is the base rate: a scheduler's base_lr is
accepted and replaced by it."""

import kvtrain as _kt

from .base import NotInKvtrain


def _no_warmup(name, warmup_steps, kwargs):
    if warmup_steps:
        raise NotInKvtrain("%s with warmup_steps" % name,
                           "kvtrain's schedules start at the base rate")
    unknown = sorted(set(kwargs) - {"warmup_begin_lr", "warmup_mode", "final_lr"})
    if unknown:
        raise TypeError("%s got argument(s) it does not take: %s" % (name, ", ".join(unknown)))


class LRScheduler(_kt.lr_scheduler.LRScheduler):
    pass


class FactorScheduler(_kt.lr_scheduler.FactorScheduler):
    def __init__(self, step, factor=1, stop_factor_lr=1e-8, base_lr=0.01, warmup_steps=0,
                 **kwargs):
        _no_warmup("FactorScheduler", warmup_steps, kwargs)
        super().__init__(step, factor, stop_factor_lr)
        self.base_lr = base_lr


class MultiFactorScheduler(_kt.lr_scheduler.MultiFactorScheduler):
    def __init__(self, step, factor=1, base_lr=0.01, warmup_steps=0, **kwargs):
        _no_warmup("MultiFactorScheduler", warmup_steps, kwargs)
        super().__init__([int(s) for s in step], factor)
        self.base_lr = base_lr


class PolyScheduler(object):
    def __init__(self, *args, **kwargs):
        raise NotInKvtrain("mx.lr_scheduler.PolyScheduler",
                           "use FactorScheduler or MultiFactorScheduler")


class CosineScheduler(object):
    def __init__(self, *args, **kwargs):
        raise NotInKvtrain("mx.lr_scheduler.CosineScheduler",
                           "use FactorScheduler or MultiFactorScheduler")
