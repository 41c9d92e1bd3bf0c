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
