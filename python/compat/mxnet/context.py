"""mx.cpu(), mx.gpu(), Context."""

import kvtrain as _kt


class Context(object):
    """A device: 'cpu' or 'gpu' and its id."""

    _default = None

    def __init__(self, device_type, device_id=0):
        if isinstance(device_type, Context):
            device_type, device_id = device_type.device_type, device_type.device_id
        if device_type not in ("cpu", "gpu", "cpu_pinned"):
            raise ValueError("Context: device type %r is not 'cpu' or 'gpu'" % (device_type,))
        self.device_type = "cpu" if device_type == "cpu_pinned" else device_type
        self.device_id = int(device_id)

    def __eq__(self, other):
        return (isinstance(other, Context) and self.device_type == other.device_type
                and self.device_id == other.device_id)

    def __hash__(self):
        return hash((self.device_type, self.device_id))

    def __repr__(self):
        return "%s(%d)" % (self.device_type, self.device_id)

    def __enter__(self):
        self._old = Context._default
        Context._default = self
        return self

    def __exit__(self, *exc):
        Context._default = self._old


def cpu(device_id=0):
    return Context("cpu", device_id)


def gpu(device_id=0):
    return Context("gpu", device_id)


def current_context():
    return Context._default or cpu()


def num_gpus():
    return _kt.num_gpus()
