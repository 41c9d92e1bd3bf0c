"""Callbacks for Module.fit (MXNet's mx.callback). A batch-end callback gets
a BatchEndParam (epoch, nbatch, eval_metric, locals); an epoch-end callback
gets (epoch, symbol, arg_params, aux_params). They run with the GIL held,
on the thread that called fit."""

import logging
import time


class BatchEndParam(object):
    def __init__(self, epoch, nbatch, eval_metric, locals=None):
        self.epoch, self.nbatch, self.eval_metric, self.locals = epoch, nbatch, eval_metric, locals


class EvalResult(object):
    """The running train metrics of the epoch, as MXNet's EvalMetric shows them."""

    def __init__(self, values):
        self._values = list(values)

    def get_name_value(self):
        return list(self._values)

    def get(self):
        return [n for n, _ in self._values], [v for _, v in self._values]


class Speedometer(object):
    """Logs samples/s and the train metrics every `frequent` batches."""

    def __init__(self, batch_size, frequent=50, auto_reset=True):
        self.batch_size, self.frequent = int(batch_size), int(frequent)
        self._tic = None
        self._last = -1

    def __call__(self, param):
        if param.nbatch < self._last or self._tic is None:
            self._tic = time.time()
        self._last = param.nbatch
        if param.nbatch % self.frequent == 0 and param.nbatch > 0:
            speed = self.frequent * self.batch_size / max(time.time() - self._tic, 1e-9)
            metrics = "".join("\t%s=%f" % nv for nv in param.eval_metric.get_name_value())
            logging.info("Epoch[%d] Batch [%d]\tSpeed: %.2f samples/sec%s",
                         param.epoch, param.nbatch, speed, metrics)
            self._tic = time.time()


class _Checkpoint(object):
    def __init__(self, prefix, period):
        self.prefix, self.period = prefix, max(1, int(period))

    def __call__(self, epoch, symbol, arg_params, aux_params):
        # Called directly (outside Module.fit): the symbol and parameters.
        if (epoch + 1) % self.period == 0:
            from . import model
            model.save_checkpoint(self.prefix, epoch + 1, symbol, arg_params, aux_params)


def do_checkpoint(prefix, period=1):
    """Saves prefix-symbol.txt and prefix-NNNN.params every `period` epochs
    (in Module.fit: by rank 0, with the optimizer states, prefix-NNNN.states,
    the same files the C++ trainer writes)."""
    return _Checkpoint(prefix, period)


def log_train_metric(period, auto_reset=False):
    """Logs the train metrics every `period` batches."""

    def _callback(param):
        if param.nbatch % period == 0:
            for name, value in param.eval_metric.get_name_value():
                logging.info("Iter[%d] Batch[%d] Train-%s=%f", param.epoch, param.nbatch,
                             name, value)
    return _callback
