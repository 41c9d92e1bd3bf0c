"""mx.init: MXNet's initializers over kvtrain's (an array's values depend
only on the seed, its name and its shape). As in MXNet, names ending in
_bias and _beta start at 0 and _gamma at 1 whatever the initializer."""

import kvtrain as _kt

from .base import NotInKvtrain, missing_class

Initializer = _kt.init.Initializer


class Uniform(_kt.init.Uniform):
    def __init__(self, scale=0.07):
        super().__init__(scale)


class Normal(_kt.init.Normal):
    def __init__(self, sigma=0.01):
        super().__init__(sigma)


class Xavier(_kt.init.Xavier):
    def __init__(self, rnd_type="uniform", factor_type="avg", magnitude=3):
        if rnd_type not in ("uniform", "gaussian") or factor_type not in ("avg", "in", "out"):
            raise ValueError("Xavier: rnd_type %r (uniform, gaussian), factor_type %r "
                             "(avg, in, out)" % (rnd_type, factor_type))
        super().__init__(rnd_type, factor_type, magnitude)


class MSRAPrelu(_kt.init.Xavier):
    """He et al.'s initializer: Gaussian Xavier with magnitude 2 / (1 + slope^2)."""

    def __init__(self, factor_type="avg", slope=0.25):
        super().__init__("gaussian", factor_type, 2.0 / (1 + float(slope) ** 2))


class Constant(Initializer):
    def __init__(self, value):
        if not isinstance(value, (int, float)):
            raise NotInKvtrain("Constant with an array value", "give one number")
        super().__init__("constant:%r" % float(value))


class Zero(Constant):
    def __init__(self):
        super().__init__(0.0)


class One(Constant):
    def __init__(self):
        super().__init__(1.0)


class Bilinear(_kt.init.Bilinear):
    def __init__(self):
        super().__init__()


class Orthogonal(_kt.init.Orthogonal):
    def __init__(self, scale=1.414, rand_type="uniform"):
        super().__init__(scale, rand_type)


# MXNet's Mixed(patterns, initializers): the first pattern that matches a
# parameter's name picks its initializer.
Mixed = _kt.init.Mixed
Load = missing_class("mx.init.Load", "pass arg_params (mx.model.load_checkpoint) to fit")
LSTMBias = missing_class("mx.init.LSTMBias", "there is no RNN operator")
FusedRNN = missing_class("mx.init.FusedRNN", "there is no RNN operator")
