"""mx.optimizer: MXNet's optimizers by name, with MXNet's defaults, run by
kvtrain's store (on the servers for dist stores). An optimizer is sent as
kvtrain's specification, never as Python code, so Python subclasses and
mx.optimizer.register cannot run there and are refused."""

import kvtrain as _kt

from .base import NotInKvtrain

# MXNet's defaults where they are not kvtrain's.
_DEFAULT_LR = {"sgd": 0.01, "nag": 0.01, "adam": 0.001, "adagrad": 0.01, "ftrl": 0.1,
               "rmsprop": 0.001, "test": 0.01, "signum": 0.01, "adamax": 0.002,
               "adadelta": 0.01}
# Arguments that only name or describe parameters: accepted, not used.
_DESCRIPTIVE = {"param_idx2name", "sym", "param_dict", "begin_num_update", "aggregate_num",
                "use_fused_step"}
# MXNet's arguments of each optimizer that kvtrain's rule takes.
_ARGS = {
    "sgd": {"learning_rate", "momentum", "wd", "rescale_grad", "clip_gradient",
            "lr_scheduler", "multi_precision", "lazy_update"},
    "nag": {"learning_rate", "momentum", "wd", "rescale_grad", "clip_gradient",
            "lr_scheduler", "multi_precision"},
    "adam": {"learning_rate", "beta1", "beta2", "epsilon", "wd", "rescale_grad",
             "clip_gradient", "lr_scheduler", "multi_precision", "lazy_update"},
    "adagrad": {"learning_rate", "epsilon", "eps", "wd", "rescale_grad", "clip_gradient",
                "lr_scheduler", "multi_precision"},
    "ftrl": {"learning_rate", "lamda1", "beta", "wd", "rescale_grad", "clip_gradient",
             "lr_scheduler", "multi_precision"},
    "rmsprop": {"learning_rate", "gamma1", "gamma2", "epsilon", "centered", "clip_weights",
                "wd", "rescale_grad", "clip_gradient", "lr_scheduler", "multi_precision"},
    "test": {"learning_rate", "wd", "rescale_grad", "multi_precision", "lr_scheduler"},
    "signum": {"learning_rate", "momentum", "wd_lh", "wd", "rescale_grad", "clip_gradient",
               "lr_scheduler", "multi_precision"},
    "adamax": {"learning_rate", "beta1", "beta2", "wd", "rescale_grad", "clip_gradient",
               "lr_scheduler", "multi_precision"},
    "adadelta": {"learning_rate", "rho", "epsilon", "wd", "rescale_grad", "clip_gradient",
                 "lr_scheduler", "multi_precision"},
}
_NOT_HERE = ("signsgd", "ftml", "dcasgd", "sgld", "nadam", "lamb", "lars", "lbsgd",
             "adabelief", "adamw", "lans", "groupadagrad")
_KVTRAIN_HAS = "sgd, nag, adam, adagrad, ftrl, rmsprop, signum, adamax, adadelta and test"


class Optimizer(object):
    """An optimizer by MXNet's name and arguments."""

    def __init__(self, name, **kwargs):
        name = name.lower()
        if name in _NOT_HERE:
            raise NotInKvtrain("optimizer %r" % name, "kvtrain has " + _KVTRAIN_HAS)
        if name not in _ARGS:
            raise ValueError("optimizer %r: unknown (MXNet's names kvtrain runs: %s)"
                             % (name, ", ".join(sorted(_ARGS))))
        unknown = sorted(set(kwargs) - _ARGS[name] - _DESCRIPTIVE)
        if unknown:
            raise TypeError("optimizer %r got argument(s) it does not take: %s"
                            % (name, ", ".join(unknown)))
        self.name = name
        self.kwargs = dict(kwargs)
        self.learning_rate = kwargs.get("learning_rate", _DEFAULT_LR[name])
        self.rescale_grad = kwargs.get("rescale_grad", 1.0)
        self.wd = kwargs.get("wd", 0.0)
        self.multi_precision = bool(kwargs.get("multi_precision", False))
        self.idx2name = dict(kwargs.get("param_idx2name") or {})
        sym = kwargs.get("sym")
        self._sym_attrs = sym.attr_dict() if sym is not None else {}
        self.lr_mult, self.wd_mult = self._from_sym("__lr_mult__"), {}
        self.set_wd_mult({})
        self._kvtrain = self._translate()

    def _from_sym(self, key):
        return {n: float(a[key]) for n, a in self._sym_attrs.items() if key in a}

    def set_lr_mult(self, args_lr_mult):
        """Each parameter's learning-rate multiplier, by name (or index),
        over the `sym` variables' lr_mult."""
        self.lr_mult = self._from_sym("__lr_mult__")
        self.lr_mult.update(args_lr_mult)
        self._kvtrain = self._translate()

    def set_wd_mult(self, args_wd_mult):
        """Each parameter's weight-decay multiplier, by name (or index). As
        MXNet's: given param_idx2name, a parameter whose name does not end
        in _weight or _gamma (a bias, BatchNorm's beta) takes none."""
        self.wd_mult = {n: 0.0 for n in self.idx2name.values()
                        if not (n.endswith("_weight") or n.endswith("_gamma"))}
        self.wd_mult.update(self._from_sym("__wd_mult__"))
        self.wd_mult.update(args_wd_mult)
        if hasattr(self, "_kvtrain"):
            self._kvtrain = self._translate()

    def _mults(self, mults):
        """kvtrain's multipliers by key: the names and indices given, and the
        indices param_idx2name names (int keys reach the store as decimals)."""
        out = {str(k): float(v) for k, v in mults.items()}
        for index, name in self.idx2name.items():
            if name in mults and index not in mults:
                out[str(index)] = float(mults[name])
        return out

    def _translate(self):
        kw = {k: v for k, v in self.kwargs.items()
              if k not in _DESCRIPTIVE and k not in ("multi_precision", "lazy_update")
              and v is not None}
        if "eps" in kw:
            kw["epsilon"] = kw.pop("eps")
        if self.name == "rmsprop":
            if kw.pop("centered", False):
                raise NotInKvtrain("rmsprop with centered=True (Graves' variant)",
                                   "use centered=False, the default")
            if kw.pop("clip_weights", None) is not None:
                raise NotInKvtrain("rmsprop's clip_weights", "leave it unset")
            kw.pop("gamma2", None)  # the centred variant's momentum only
        if self.name == "signum":
            kw.setdefault("momentum", 0.9)  # MXNet's default; 0 is signSGD
        if self.name == "test":
            # MXNet's test rule, w += rescale_grad * g, is SGD with rate 1
            # and the rescale negated: w -= 1 * (-rescale_grad * g).
            if kw.get("wd", 0):
                raise ValueError("optimizer 'test' takes no wd")
            return _kt.optimizer.create("sgd", learning_rate=1.0,
                                        rescale_grad=-float(self.rescale_grad))
        kw["learning_rate"] = self.learning_rate
        if self.lr_mult:
            kw["lr_mult"] = self._mults(self.lr_mult)
        if self.wd_mult:
            kw["wd_mult"] = self._mults(self.wd_mult)
        return _kt.optimizer.create(self.name, **kw)

    def __repr__(self):
        return "mx.optimizer.%s(%s)" % (self.name, ", ".join(
            "%s=%r" % kv for kv in sorted(self.kwargs.items())))


def create(name, **kwargs):
    """An optimizer by MXNet's name ('sgd', 'adam', 'test', ...)."""
    if isinstance(name, Optimizer):
        return name
    return Optimizer(name, **kwargs)


def to_kvtrain(optimizer):
    """kvtrain's optimizer for an mx.optimizer (or a kvtrain one, as is)."""
    if isinstance(optimizer, Optimizer):
        return optimizer._kvtrain
    if isinstance(optimizer, _kt.optimizer.Optimizer):
        return optimizer
    if isinstance(optimizer, str):
        return Optimizer(optimizer)._kvtrain
    raise NotInKvtrain("an optimizer of type %s (a Python optimizer on the store)"
                       % type(optimizer).__name__,
                       "use mx.optimizer.create with one of " + _KVTRAIN_HAS)


def register(klass):
    raise NotInKvtrain("mx.optimizer.register (Python optimizers run by the store)",
                       "use mx.optimizer.create with one of " + _KVTRAIN_HAS)


def SGD(**kwargs):
    return Optimizer("sgd", **kwargs)


def NAG(**kwargs):
    return Optimizer("nag", **kwargs)


def Adam(**kwargs):
    return Optimizer("adam", **kwargs)


def AdaGrad(**kwargs):
    return Optimizer("adagrad", **kwargs)


def Ftrl(**kwargs):
    return Optimizer("ftrl", **kwargs)


def Test(**kwargs):
    return Optimizer("test", **kwargs)


def Signum(**kwargs):
    return Optimizer("signum", **kwargs)


def Adamax(**kwargs):
    return Optimizer("adamax", **kwargs)


def AdaDelta(**kwargs):
    return Optimizer("adadelta", **kwargs)
