"""Errors of the MXNet face."""


class MXNetError(RuntimeError):
    """MXNet's error type; kvtrain's own errors are raised as they are."""


class NotInKvtrain(MXNetError, NotImplementedError):
    """An MXNet feature this face does not have (docs/mxnet.md says what to
    use instead)."""

    def __init__(self, what, instead=None):
        msg = "%s is not available in kvtrain's MXNet face" % what
        if instead:
            msg += "; " + instead
        super().__init__(msg + " (see docs/mxnet.md)")


def missing_class(qualified, instead, base=object):
    """A class standing for MXNet's `qualified` (e.g. "mx.init.Orthogonal")
    whose construction raises NotInKvtrain."""

    def __init__(self, *args, **kwargs):
        raise NotInKvtrain(qualified, instead)

    return type(qualified.rsplit(".", 1)[-1], (base,), {"__init__": __init__})
