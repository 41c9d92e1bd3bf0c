"""kvtrain.sym: symbolic graphs (MXNet's mx.sym).

    data = kvtrain.sym.Variable('data')
    fc1 = kvtrain.sym.FullyConnected(data, num_hidden=128, name='fc1')
    act = kvtrain.sym.Activation(fc1, act_type='relu', name='relu1')
    net = kvtrain.sym.SoftmaxOutput(act, name='softmax')

There is one function per operator registered in the C++ core, generated
from the registry at import (so a new C++ operator appears here with no
Python code); help(kvtrain.sym.Convolution) lists its inputs and
attributes with their defaults. Inputs not given become variables named
"<name>_<input>" (fc1_weight, fc1_bias, softmax_label). A mistake (unknown
attribute, bad value, too many inputs) raises at once with the C++ core's
message.
"""

import sys

from . import _lib

_counters = {}


def _is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) or (
        hasattr(x, "dtype") and getattr(x, "shape", None) == ())


def _auto_name(op_type):
    base = op_type.lower()
    n = _counters.get(base, 0)
    _counters[base] = n + 1
    return "%s%d" % (base, n)


def _attr_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(str(int(v)) for v in value) + ")"
    return str(value)


class Symbol(object):
    """A graph (immutable; copies share it)."""

    def __init__(self, handle):
        self._handle = handle

    def attr_dict(self):
        """{node name: its attributes} for the nodes that have any (a
        variable's __lr_mult__ and __wd_mult__, an operator's settings)."""
        return {name: dict(attrs) for name, _, attrs, _ in self._handle.graph()["nodes"]
                if attrs}

    def list_arguments(self):
        """Variables the graph reads (data, fc1_weight, ...)."""
        return self._handle.list_arguments()

    def list_outputs(self):
        return self._handle.list_outputs()

    def list_auxiliary_states(self):
        return self._handle.list_auxiliary_states()

    def infer_shape(self, **shapes):
        """(arg_shapes, out_shapes, aux_shapes) from known argument shapes,
        e.g. infer_shape(data=(100, 784))."""
        return self._handle.infer_shape(shapes)

    def tojson(self):
        """The graph as text (the format of the checkpoints' P-symbol.txt)."""
        return self._handle.tojson()

    def save(self, fname):
        self._handle.save(fname)

    def __getitem__(self, index):
        if isinstance(index, str):
            outputs = self.list_outputs()
            if index not in outputs:
                raise KeyError("no output %r; outputs: %s" % (index, ", ".join(outputs)))
            index = outputs.index(index)
        return Symbol(self._handle.output(int(index)))

    def _binary(self, other, op, sign):
        if not isinstance(other, Symbol):
            raise TypeError("symbol %s %s: a symbol's arithmetic is with a symbol or a number"
                            % (sign, type(other).__name__))
        return type(self)(_lib.Symbol.op(op, _auto_name(op), [self._handle, other._handle], {}))

    def _scalar(self, op, value):
        # MXNet's _plus_scalar & co.: x op number, elementwise.
        return type(self)(_lib.Symbol.op(op, _auto_name(op), [self._handle],
                                         {"scalar": repr(float(value))}))

    def __add__(self, other):
        if _is_number(other):
            return self._scalar("_plus_scalar", other)
        return self._binary(other, "elemwise_add", "+")

    __radd__ = __add__

    def __sub__(self, other):
        if _is_number(other):
            return self._scalar("_minus_scalar", other)
        return self._binary(other, "elemwise_sub", "-")

    def __rsub__(self, other):
        if _is_number(other):
            return self._scalar("_rminus_scalar", other)
        return NotImplemented

    def __mul__(self, other):
        if _is_number(other):
            return self._scalar("_mul_scalar", other)
        return self._binary(other, "elemwise_mul", "*")

    __rmul__ = __mul__

    def __truediv__(self, other):
        if _is_number(other):
            return self._scalar("_div_scalar", other)
        return self._binary(other, "broadcast_div", "/")

    def __rtruediv__(self, other):
        if _is_number(other):
            return self._scalar("_rdiv_scalar", other)
        return NotImplemented

    __div__, __rdiv__ = __truediv__, __rtruediv__

    def __neg__(self):
        return self._scalar("_mul_scalar", -1.0)

    def __repr__(self):
        return "<Symbol outputs=%s>" % ", ".join(self.list_outputs())


def Variable(name, shape=None, lr_mult=None, wd_mult=None, attr=None, **kwargs):
    """An input, parameter or label array named `name`. lr_mult, wd_mult:
    this parameter's multipliers of the optimizer's learning rate and weight
    decay (0 freezes it), kept in the graph as its __lr_mult__ and
    __wd_mult__ attributes; Module.init_optimizer applies them."""
    if not isinstance(name, str) or not name:
        raise TypeError("Variable: expected a non-empty name")
    attrs = {str(k): str(v) for k, v in (attr or {}).items()}
    for key, m in (("__lr_mult__", lr_mult), ("__wd_mult__", wd_mult)):
        if m is not None:
            attrs[key] = repr(float(m))
    return Symbol(_lib.Symbol.variable(name, attrs))


var = Variable


def Group(symbols):
    """The outputs of several symbols as one symbol."""
    return Symbol(_lib.Symbol.group([s._handle for s in symbols]))


def load(fname):
    """A symbol saved with Symbol.save (or a checkpoint's P-symbol.txt)."""
    return Symbol(_lib.Symbol.load(fname))


def load_json(text):
    return Symbol(_lib.Symbol.fromjson(text))


def _make_op(op_type):
    desc = _lib.describe_op(op_type)
    inputs = list(desc["arguments"])

    variadic = inputs == ["arg0"]  # Concat(*data, dim=1): any number of inputs

    def op(*args, **kwargs):
        name = kwargs.pop("name", None) or _auto_name(op_type)
        kwargs.pop("attr", None)
        if variadic:
            for s in args:
                if not isinstance(s, Symbol):
                    raise TypeError("%s %s: inputs must be Symbols, got %s"
                                    % (op_type, name, type(s).__name__))
            kwargs.setdefault("num_args", len(args))
            attrs = {k: _attr_text(v) for k, v in kwargs.items()}
            return Symbol(_lib.Symbol.op(op_type, name, [s._handle for s in args], attrs))
        if len(args) > len(inputs):
            raise TypeError("%s takes at most %d inputs (%s), got %d"
                            % (op_type, len(inputs), ", ".join(inputs), len(args)))
        given = dict(zip(inputs, args))
        for n in inputs:
            if n in kwargs:
                if n in given:
                    raise TypeError("%s: input %r given twice" % (op_type, n))
                given[n] = kwargs.pop(n)
        for n, s in given.items():
            if not isinstance(s, Symbol):
                raise TypeError("%s %s: input %r must be a Symbol, got %s"
                                % (op_type, name, n, type(s).__name__))
        last = max([inputs.index(n) for n in given] or [-1])
        ordered = [given[n]._handle if n in given else _lib.Symbol.variable(name + "_" + n)
                   for n in inputs[:last + 1]]
        attrs = {k: _attr_text(v) for k, v in kwargs.items()}
        return Symbol(_lib.Symbol.op(op_type, name, ordered, attrs))

    lines = ["%s(%s, name=None, **attributes)" % (op_type, ", ".join(inputs)), "",
             "The %s operator of kvtrain's C++ core." % op_type, "",
             "Inputs (Symbols; missing ones become variables <name>_<input>): "
             + (", ".join(inputs) or "none"),
             "Outputs: " + ", ".join(desc["outputs"])]
    if desc["aux"]:
        lines.append("Auxiliary states: " + ", ".join(desc["aux"]))
    lines.append("")
    lines.append("Attributes:")
    for key, kind, default, required in desc["attrs"]:
        lines.append("    %s : %s, %s" % (key, kind,
                                           "required" if required else
                                           ("default %s" % default if default else "optional")))
    op.__name__ = op_type
    op.__doc__ = "\n".join(lines)
    return op


def _generate():
    module = sys.modules[__name__]
    for op_type in _lib.registered_ops():
        setattr(module, op_type, _make_op(op_type))


_generate()
