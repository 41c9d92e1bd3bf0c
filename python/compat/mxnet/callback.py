"""mx.callback: MXNet's callbacks for Module.fit."""

import logging
import sys

import kvtrain as _kt

Speedometer = _kt.callback.Speedometer
log_train_metric = _kt.callback.log_train_metric


def do_checkpoint(prefix, period=1):
    """Saves the model every `period` epochs in MXNet's files
    (prefix-symbol.json, prefix-NNNN.params), as mx.model.save_checkpoint."""
    period = max(1, int(period))

    def _callback(iter_no, sym, arg, aux):
        if (iter_no + 1) % period == 0:
            from . import model
            model.save_checkpoint(prefix, iter_no + 1, sym, arg, aux)
    return _callback


def module_checkpoint(mod, prefix, period=1, save_optimizer_states=False):
    period = max(1, int(period))

    def _callback(iter_no, sym=None, arg=None, aux=None):
        if (iter_no + 1) % period == 0:
            mod.save_checkpoint(prefix, iter_no + 1, save_optimizer_states)
    return _callback


class ProgressBar(object):
    """A text bar of the epoch's progress, every batch."""

    def __init__(self, total, length=80):
        self.total, self.bar_len = int(total), int(length)

    def __call__(self, param):
        count = param.nbatch
        filled = int(round(self.bar_len * count / float(self.total)))
        percents = round(100.0 * count / float(self.total), 1)
        bar = "=" * filled + "-" * (self.bar_len - filled)
        sys.stdout.write("[%s] %s%s\r" % (bar, percents, "%"))


class LogValidationMetricsCallback(object):
    """Logs each evaluation metric of param.eval_metric."""

    def __call__(self, param):
        if not param.eval_metric:
            return
        for name, value in param.eval_metric.get_name_value():
            logging.info("Epoch[%d] Validation-%s=%f", param.epoch, name, value)
