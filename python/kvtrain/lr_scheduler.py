"""Learning-rate schedules (MXNet's kvtrain.lr_scheduler), applied by the
optimizer wherever it runs (on the servers for dist stores). Steps count
updates (batches)."""


class LRScheduler(object):
    def _spec(self):
        raise NotImplementedError


class FactorScheduler(LRScheduler):
    """lr x factor every `step` updates, never below stop_factor_lr."""

    def __init__(self, step, factor=1.0, stop_factor_lr=1e-8):
        if int(step) < 1:
            raise ValueError("FactorScheduler: step %r must be at least 1" % (step,))
        self.step, self.factor, self.stop_factor_lr = int(step), float(factor), float(stop_factor_lr)

    def _spec(self):
        return {"type": "factor", "step": self.step, "factor": self.factor,
                "stop_factor_lr": self.stop_factor_lr}


class MultiFactorScheduler(LRScheduler):
    """lr x factor after each of the increasing update counts in `step`."""

    def __init__(self, step, factor=1.0, stop_factor_lr=1e-8):
        step = [int(s) for s in step]
        if any(b <= a for a, b in zip(step, step[1:])) or any(s < 1 for s in step):
            raise ValueError("MultiFactorScheduler: steps %r must increase from 1" % (step,))
        self.step, self.factor, self.stop_factor_lr = step, float(factor), float(stop_factor_lr)

    def _spec(self):
        return {"type": "multifactor", "step": self.step, "factor": self.factor,
                "stop_factor_lr": self.stop_factor_lr}
