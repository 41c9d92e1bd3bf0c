"""Learning-rate schedules (MXNet's kvtrain.lr_scheduler), applied by the
optimizer wherever it runs (on the servers for dist stores). Steps count
updates (batches), from 1; the optimizer's learning_rate is the base rate.
Every schedule can start with a warm-up: updates before warmup_steps run at
warmup_begin_lr, rising linearly to the base rate (warmup_mode='linear') or
staying there ('constant')."""


class LRScheduler(object):
    def __init__(self, warmup_steps=0, warmup_begin_lr=0.0, warmup_mode="linear"):
        if int(warmup_steps) < 0:
            raise ValueError("%s: warmup_steps %r must be >= 0"
                             % (type(self).__name__, warmup_steps))
        if warmup_mode not in ("linear", "constant"):
            raise ValueError("%s: warmup_mode %r must be 'linear' or 'constant'"
                             % (type(self).__name__, warmup_mode))
        self.warmup_steps, self.warmup_begin_lr = int(warmup_steps), float(warmup_begin_lr)
        self.warmup_mode = warmup_mode

    def _warmup(self):
        return {"warmup_steps": self.warmup_steps, "warmup_begin_lr": self.warmup_begin_lr,
                "warmup_constant": self.warmup_mode == "constant"}

    def _spec(self):
        raise NotImplementedError


class FactorScheduler(LRScheduler):
    """lr x factor every `step` updates, never below stop_factor_lr."""

    def __init__(self, step, factor=1.0, stop_factor_lr=1e-8, **warmup):
        super().__init__(**warmup)
        if int(step) < 1:
            raise ValueError("FactorScheduler: step %r must be at least 1" % (step,))
        self.step, self.factor, self.stop_factor_lr = int(step), float(factor), float(stop_factor_lr)

    def _spec(self):
        return dict(self._warmup(), type="factor", step=self.step, factor=self.factor,
                    stop_factor_lr=self.stop_factor_lr)


class MultiFactorScheduler(LRScheduler):
    """lr x factor after each of the increasing update counts in `step`."""

    def __init__(self, step, factor=1.0, stop_factor_lr=1e-8, **warmup):
        super().__init__(**warmup)
        step = [int(s) for s in step]
        if any(b <= a for a, b in zip(step, step[1:])) or any(s < 1 for s in step):
            raise ValueError("MultiFactorScheduler: steps %r must increase from 1" % (step,))
        self.step, self.factor, self.stop_factor_lr = step, float(factor), float(stop_factor_lr)

    def _spec(self):
        return dict(self._warmup(), type="multifactor", step=self.step, factor=self.factor,
                    stop_factor_lr=self.stop_factor_lr)


class PolyScheduler(LRScheduler):
    """From the base rate down to final_lr along (1 - u/n)^pwr, reached at
    update max_update (n: the updates after the warm-up), then held."""

    def __init__(self, max_update, pwr=2, final_lr=0.0, **warmup):
        super().__init__(**warmup)
        self.max_update, self.pwr, self.final_lr = int(max_update), float(pwr), float(final_lr)

    def _spec(self):
        return dict(self._warmup(), type="poly", max_update=self.max_update, power=self.pwr,
                    final_lr=self.final_lr)


class CosineScheduler(LRScheduler):
    """From the base rate down to final_lr along half a cosine, reached at
    update max_update, then held."""

    def __init__(self, max_update, final_lr=0.0, **warmup):
        super().__init__(**warmup)
        self.max_update, self.final_lr = int(max_update), float(final_lr)

    def _spec(self):
        return dict(self._warmup(), type="cosine", max_update=self.max_update,
                    final_lr=self.final_lr)
