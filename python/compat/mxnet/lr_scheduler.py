"""mx.lr_scheduler: MXNet's schedules, applied by kvtrain's optimizer
wherever it runs (on the servers for dist stores), with MXNet's warm-up. As
in MXNet the optimizer's learning_rate is the base rate: a scheduler's
base_lr is accepted and replaced by it."""

import kvtrain as _kt

LRScheduler = _kt.lr_scheduler.LRScheduler


def _warmup(kwargs, name):
    warmup = {k: kwargs.pop(k) for k in ("warmup_steps", "warmup_begin_lr", "warmup_mode")
              if k in kwargs}
    if kwargs:
        raise TypeError("%s got argument(s) it does not take: %s"
                        % (name, ", ".join(sorted(kwargs))))
    return warmup


class FactorScheduler(_kt.lr_scheduler.FactorScheduler):
    def __init__(self, step, factor=1, stop_factor_lr=1e-8, base_lr=0.01, **kwargs):
        super().__init__(step, factor, stop_factor_lr, **_warmup(kwargs, "FactorScheduler"))
        self.base_lr = base_lr


class MultiFactorScheduler(_kt.lr_scheduler.MultiFactorScheduler):
    def __init__(self, step, factor=1, base_lr=0.01, **kwargs):
        super().__init__([int(s) for s in step], factor,
                         **_warmup(kwargs, "MultiFactorScheduler"))
        self.base_lr = base_lr


class PolyScheduler(_kt.lr_scheduler.PolyScheduler):
    def __init__(self, max_update, base_lr=0.01, pwr=2, final_lr=0, **kwargs):
        super().__init__(max_update, pwr, final_lr, **_warmup(kwargs, "PolyScheduler"))
        self.base_lr = base_lr


class CosineScheduler(_kt.lr_scheduler.CosineScheduler):
    def __init__(self, max_update, base_lr=0.01, final_lr=0, **kwargs):
        super().__init__(max_update, final_lr, **_warmup(kwargs, "CosineScheduler"))
        self.base_lr = base_lr
