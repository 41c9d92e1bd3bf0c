"""Optimizers: sgd, nag, adam, adagrad, ftrl, rmsprop, signum, adamax, adadelta. An optimizer is a specification (the
protobuf OptimizerSpec) that the store applies, on the parameter servers for
dist stores: it is sent as that message, never pickled.

    opt = kvtrain.optimizer.create('sgd', learning_rate=0.1, momentum=0.9, wd=1e-4)
    kv.set_optimizer(opt)
"""

from . import _lib

NAMES = ("sgd", "nag", "adam", "adagrad", "ftrl", "rmsprop", "signum", "adamax", "adadelta")


class Optimizer(object):
    """`name` and its parameters: learning_rate, momentum (sgd, nag), wd,
    rescale_grad, clip_gradient, beta1, beta2 (adam, adamax), epsilon (adam,
    adagrad, rmsprop, adadelta), lamda1, beta (ftrl), gamma1 (rmsprop), wd_lh
    (signum), rho (adadelta), lr_scheduler (kvtrain.lr_scheduler), lr_mult and
    wd_mult (dicts: a key's name, or an int key, to its multiplier of the
    learning rate or the weight decay; 1 for keys not listed). Checked at
    once: a bad value is a ValueError naming it."""

    def __init__(self, name, **params):
        self.name = name.lower()
        self.params = dict(params)
        if "wd" not in self.params and "weight_decay" in self.params:
            self.params["wd"] = self.params.pop("weight_decay")
        self.spec = _lib.optimizer_spec(self.name, self.params)

    def __repr__(self):
        return "Optimizer(%r, %s)" % (self.name, ", ".join(
            "%s=%r" % kv for kv in sorted(self.params.items())))


def create(name, **params):
    """An Optimizer by name (an Optimizer passes through)."""
    if isinstance(name, Optimizer):
        return name
    return Optimizer(name, **params)


def SGD(**params):
    return Optimizer("sgd", **params)


def NAG(**params):
    return Optimizer("nag", **params)


def Adam(**params):
    return Optimizer("adam", **params)


def AdaGrad(**params):
    return Optimizer("adagrad", **params)


def Ftrl(**params):
    """FTRL-proximal (lamda1: L1 strength, beta), the CTR models' usual
    choice for row-sparse tables."""
    return Optimizer("ftrl", **params)


def RMSProp(**params):
    """Non-centred RMSProp: gamma1 (the mean square's decay, 0.9), epsilon."""
    return Optimizer("rmsprop", **params)


def Signum(**params):
    """Signum (the sign of the momentum; momentum 0.9 unless given, 0 is
    signSGD), with wd_lh, the decoupled weight decay."""
    params.setdefault("momentum", 0.9)
    return Optimizer("signum", **params)


def Adamax(**params):
    """Adam under the infinity norm: beta1, beta2."""
    return Optimizer("adamax", **params)


def AdaDelta(**params):
    """AdaDelta: rho (0.9), epsilon (1e-5); the learning rate is not used."""
    return Optimizer("adadelta", **params)
