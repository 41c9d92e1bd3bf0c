"""mx.metric: MXNet's evaluation metrics. The classification metrics are
kvtrain's trainer's own (the C++ core computes them, in fit and here);
CustomMetric runs the script's function."""

import numpy as _numpy

import kvtrain as _kt

from .base import NotInKvtrain
from .ndarray import NDArray


def _np(x):
    return x.asnumpy() if isinstance(x, NDArray) else _numpy.asarray(x)


def _pairs(labels, preds):
    labels = labels if isinstance(labels, (list, tuple)) else [labels]
    preds = preds if isinstance(preds, (list, tuple)) else [preds]
    if len(labels) != len(preds):
        raise ValueError("metric: %d labels for %d predictions" % (len(labels), len(preds)))
    return [(_np(l), _np(p)) for l, p in zip(labels, preds)]


class EvalMetric(object):
    """MXNet's metric base: update(labels, preds), get(), reset()."""

    def __init__(self, name, output_names=None, label_names=None, **kwargs):
        self.name = str(name)
        self.output_names, self.label_names = output_names, label_names
        self.num_inst, self.sum_metric = 0, 0.0

    def reset(self):
        self.num_inst, self.sum_metric = 0, 0.0

    def update(self, labels, preds):
        raise NotImplementedError

    def get(self):
        return (self.name, self.sum_metric / self.num_inst if self.num_inst else float("nan"))

    def get_name_value(self):
        name, value = self.get()
        if not isinstance(name, list):
            name, value = [name], [value]
        return list(zip(name, value))

    def __str__(self):
        return "EvalMetric: %s" % dict(self.get_name_value())


class _Trainer(EvalMetric):
    """One of the trainer's metrics (`spec` as fit takes it)."""

    def __init__(self, spec, name, **kwargs):
        super().__init__(name, **kwargs)
        self._spec = spec
        self._m = _kt._lib.Metric(spec)

    def reset(self):
        super().reset()
        self._m.reset()

    def update(self, labels, preds):
        for label, pred in _pairs(labels, preds):
            label = _numpy.ascontiguousarray(label.reshape(-1), _numpy.float32)
            pred = _numpy.asarray(pred, _numpy.float32)
            if self._spec in ("mse", "rmse", "mae"):
                pred = pred.reshape(label.size, -1)
            elif pred.ndim == 1 and pred.shape == label.shape:  # class ids, not scores
                ids = pred.astype(_numpy.int64)
                pred = _numpy.zeros((ids.size, max(int(ids.max()) + 1, int(label.max()) + 1)),
                                _numpy.float32)
                pred[_numpy.arange(ids.size), ids] = 1
            pred = _numpy.ascontiguousarray(pred.reshape(pred.shape[0], -1))
            self._m.update(label, pred)
        self.num_inst = self._m.count
        self.sum_metric = self._m.get() * self._m.count


class Accuracy(_Trainer):
    def __init__(self, axis=1, name="accuracy", **kwargs):
        super().__init__("accuracy", name, **kwargs)


class TopKAccuracy(_Trainer):
    def __init__(self, top_k=1, name="top_k_accuracy", **kwargs):
        super().__init__("top_k_accuracy:%d" % int(top_k), "%s_%d" % (name, int(top_k)),
                         **kwargs)
        self.top_k = int(top_k)


class CrossEntropy(_Trainer):
    def __init__(self, eps=1e-12, name="cross-entropy", **kwargs):
        super().__init__("cross-entropy", name, **kwargs)


class NegativeLogLikelihood(_Trainer):
    def __init__(self, eps=1e-12, name="nll-loss", **kwargs):
        super().__init__("nll-loss", name, **kwargs)


class MSE(_Trainer):
    def __init__(self, name="mse", **kwargs):
        super().__init__("mse", name, **kwargs)


class RMSE(_Trainer):
    def __init__(self, name="rmse", **kwargs):
        super().__init__("rmse", name, **kwargs)


class MAE(_Trainer):
    def __init__(self, name="mae", **kwargs):
        super().__init__("mae", name, **kwargs)


class Perplexity(_Trainer):
    """e to the mean negative log-likelihood; rows labelled `ignore_label`
    are left out."""

    def __init__(self, ignore_label=None, axis=-1, name="perplexity", **kwargs):
        if axis not in (-1, 1):
            raise NotInKvtrain("Perplexity(axis=%r)" % (axis,),
                               "kvtrain takes the classes on the last axis of (batch, classes)")
        spec = "perplexity" if ignore_label is None else "perplexity:%d" % int(ignore_label)
        super().__init__(spec, name, **kwargs)
        self.ignore_label = ignore_label


class F1(_Trainer):
    """Binary F1 of the argmax (class 1 positive): 'macro' averages each
    update's F1, 'micro' counts every row."""

    def __init__(self, name="f1", average="macro", **kwargs):
        if average not in ("macro", "micro"):
            raise ValueError("F1: average must be 'macro' or 'micro', got %r" % (average,))
        super().__init__("f1" if average == "macro" else "f1:micro", name, **kwargs)
        self.average = average


class CustomMetric(EvalMetric):
    """feval(label, pred) on numpy arrays: a value, or (sum, count)."""

    def __init__(self, feval, name=None, allow_extra_outputs=False, **kwargs):
        if name is None:
            name = getattr(feval, "__name__", "custom")
            if name.find("<") != -1:
                name = "custom(%s)" % name
        super().__init__(name, **kwargs)
        self._feval = feval

    def update(self, labels, preds):
        for label, pred in _pairs(labels, preds):
            r = self._feval(label, pred)
            if isinstance(r, tuple):
                self.sum_metric += r[0]
                self.num_inst += r[1]
            else:
                self.sum_metric += r
                self.num_inst += 1


def np(numpy_feval, name=None, allow_extra_outputs=False):  # noqa: F811 (MXNet's name)
    return CustomMetric(numpy_feval, name, allow_extra_outputs)


class CompositeEvalMetric(EvalMetric):
    def __init__(self, metrics=None, name="composite", **kwargs):
        super().__init__(name, **kwargs)
        self.metrics = [create(m) for m in (metrics or [])]

    def add(self, metric):
        self.metrics.append(create(metric))

    def get_metric(self, index):
        return self.metrics[index]

    def reset(self):
        for m in self.metrics:
            m.reset()

    def update(self, labels, preds):
        for m in self.metrics:
            m.update(labels, preds)

    def get(self):
        names, values = [], []
        for m in self.metrics:
            for n, v in m.get_name_value():
                names.append(n)
                values.append(v)
        return names, values


_BY_NAME = {
    "acc": Accuracy, "accuracy": Accuracy, "top_k_accuracy": TopKAccuracy,
    "top_k_acc": TopKAccuracy, "ce": CrossEntropy, "cross-entropy": CrossEntropy,
    "nll_loss": NegativeLogLikelihood, "nll-loss": NegativeLogLikelihood,
    "mse": MSE, "rmse": RMSE, "mae": MAE, "f1": F1, "perplexity": Perplexity,
}
_NOT_HERE = ("mcc", "pearsonr", "pcc", "loss", "torch", "caffe")


def create(metric, *args, **kwargs):
    """A metric from a name ('acc', 'top_k_accuracy', 'ce', 'nll_loss'), a
    function (CustomMetric), a list (CompositeEvalMetric) or a metric."""
    if isinstance(metric, EvalMetric):
        return metric
    if callable(metric):
        return CustomMetric(metric, *args, **kwargs)
    if isinstance(metric, (list, tuple)):
        return CompositeEvalMetric([create(m, *args, **kwargs) for m in metric])
    if not isinstance(metric, str):
        raise TypeError("metric.create: expected a name, function, list or metric, got %s"
                        % type(metric).__name__)
    name = metric.lower()
    if name in _NOT_HERE:
        raise NotInKvtrain("metric %r" % metric,
                           "kvtrain has accuracy, top_k_accuracy, cross-entropy, nll_loss, "
                           "perplexity, f1, mse, rmse, mae and CustomMetric")
    if name not in _BY_NAME:
        raise ValueError("metric.create: unknown metric %r (known: %s)"
                         % (metric, ", ".join(sorted(_BY_NAME))))
    return _BY_NAME[name](*args, **kwargs)


def trainer_specs(metric):
    """The names kvtrain's fit computes for `metric` (a name, a metric or a
    list); a CustomMetric cannot run inside the C++ loop."""
    out = []
    for m in (metric if isinstance(metric, (list, tuple)) else [metric]):
        m = create(m)
        if isinstance(m, CompositeEvalMetric):
            out += trainer_specs(m.metrics)
        elif isinstance(m, _Trainer):
            out.append(m._spec)
        else:
            raise NotInKvtrain("a %s in Module.fit" % type(m).__name__,
                               "fit computes accuracy, top_k_accuracy, cross-entropy, "
                               "nll_loss, perplexity, f1, mse, rmse and mae; score the model "
                               "with predict() "
                               "and the metric")
    return out
