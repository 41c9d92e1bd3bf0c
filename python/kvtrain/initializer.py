"""Weight initializers (kvtrain.init): Uniform, Normal, Xavier, Orthogonal,
Bilinear. Each array's values depend only on the seed, its name and its
shape; names ending in _bias, _beta, _moving_mean start at 0 and _gamma,
_moving_var at 1."""


class Initializer(object):
    def __init__(self, text, seed=0):
        self._text = text
        self.seed = int(seed)

    def __repr__(self):
        return "Initializer(%r, seed=%d)" % (self._text, self.seed)


class Uniform(Initializer):
    """U(-scale, scale)."""

    def __init__(self, scale=0.07, seed=0):
        super(Uniform, self).__init__("uniform:%r" % float(scale), seed)


class Normal(Initializer):
    """N(0, sigma^2)."""

    def __init__(self, sigma=0.01, seed=0):
        super(Normal, self).__init__("normal:%r" % float(sigma), seed)


class Xavier(Initializer):
    """MXNet's Xavier: rnd_type 'uniform' or 'gaussian', factor_type 'avg',
    'in' or 'out', magnitude."""

    def __init__(self, rnd_type="uniform", factor_type="avg", magnitude=3, seed=0):
        super(Xavier, self).__init__(
            "xavier:%s:%s:%r" % (rnd_type, factor_type, float(magnitude)), seed)


class Orthogonal(Initializer):
    """A weight seen as (shape[0], the rest) gets orthonormal rows (or
    columns, when taller than wide) times `scale`, from random values drawn
    'uniform' or 'normal' (MXNet's Orthogonal)."""

    def __init__(self, scale=1.414, rand_type="uniform", seed=0):
        if rand_type not in ("uniform", "normal"):
            raise ValueError("Orthogonal: rand_type %r (uniform, normal)" % (rand_type,))
        super(Orthogonal, self).__init__(
            "orthogonal:%r:%s" % (float(scale), "uniform" if rand_type == "uniform" else "gaussian"),
            seed)


class Bilinear(Initializer):
    """Every kernel of a 4-D weight the bilinear interpolation filter: a
    Deconvolution of stride s and kernel 2s with it upsamples by s (MXNet's
    Bilinear)."""

    def __init__(self, seed=0):
        super(Bilinear, self).__init__("bilinear", seed)


class Mixed(Initializer):
    """Per parameter, the initializer of the first pattern (a regular
    expression, matched from the name's start as MXNet's re.match) that
    matches its name, e.g. Mixed(['up.*', '.*'], [Bilinear(), Xavier()])."""

    def __init__(self, patterns, initializers):
        if len(patterns) != len(initializers) or not patterns:
            raise ValueError("Mixed: %d patterns for %d initializers (one each)"
                             % (len(patterns), len(initializers)))
        for init in initializers:
            if not isinstance(init, Initializer) or isinstance(init, Mixed):
                raise TypeError("Mixed: expected kvtrain.init initializers, got %r" % (init,))
        import re
        self.map = [(re.compile(p), init) for p, init in zip(patterns, initializers)]
        super(Mixed, self).__init__(None, 0)

    def choose(self, name):
        """The initializer that fills `name` (ValueError when none matches)."""
        for pattern, init in self.map:
            if pattern.match(name):
                return init
        raise ValueError("Mixed: no pattern matches parameter %r; add '.*' last" % (name,))

    def arrays(self, names_and_shapes):
        """{name: numpy array} for [(name, shape)], each by its initializer."""
        from . import _lib
        out = {}
        for name, shape in names_and_shapes:
            init = self.choose(name)
            out[name] = _lib.init_array(init._text, init.seed, name, tuple(shape))
        return out

