"""mx.sym / mx.symbol: MXNet's symbol API over kvtrain's graphs.

Every operator kvtrain's core registers is here under MXNet's name and
arguments (`data=`, `num_hidden=`, `kernel=(5, 5)`, ...). MXNet's attributes
that tune cuDNN and leave the result alone (`workspace`, `cudnn_tune`,
`cudnn_off`) are accepted on every operator; any other attribute an
operator does not have is an error naming it. An MXNet operator kvtrain does
not have raises NotInKvtrain naming it.
"""

import json
import sys

import numpy as np

import kvtrain as _kt
from kvtrain import _lib

from .base import NotInKvtrain

# Attributes that only tune how cuDNN computes.
_HARMLESS = ("workspace", "cudnn_tune", "cudnn_off")
# MXNet attributes kvtrain's operators do not have, accepted at the value
# that computes what kvtrain computes.
_DEFAULT_ONLY = {  # name: (MXNet's default, the spellings of it MXNet writes)
    "dilate": ("(1, 1)", {"(1, 1)", "(1,1)", "(1, 1, 1)", "(1,1,1)", "()", "(1,)", "(1)"}),
    "num_group": ("1", {"1"}),
    "target_shape": ("()", {"()", "(0, 0)", "(0,0)"}),
    "lhs_axes": ("None", {"None"}),
    "rhs_axes": ("None", {"None"}),
    "layout": ("None", {"None", "NCHW", "NCW", "NCDHW"}),
    "pooling_convention": ("valid", {"valid"}),
    "output_mean_var": ("False", {"False", "false", "0"}),
    "axis": ("1", {"1"}),
    "axes": ("()", {"()"}),
    "multi_output": ("False", {"False", "false", "0"}),
    "preserve_shape": ("False", {"False", "false", "0"}),
    "out_grad": ("False", {"False", "false", "0"}),
    "smooth_alpha": ("0", {"0", "0.0"}),
    "mode": ("training", {"training"}),
    "p_value": ("None", {"None"}),
    "count_include_pad": ("True", {"True", "true", "1", "None"}),
    "lower_bound": ("0.125", {"0.125"}),
    "upper_bound": ("0.334", {"0.334"}),
    "use_length": ("False", {"False", "false", "0"}),
    "temperature": ("None", {"None"}),
}
# MXNet's hints on variables: what they say is fixed in kvtrain, or unused.
_VARIABLE_HINTS = ("__shape__", "__dtype__", "__storage_type__", "__init__", "__profiler_scope__")


# MXNet operators kvtrain's core does not have (a selection of the common).
_NOT_HERE = {
    "SoftmaxActivation", "dot", "batch_dot", "transpose", "SliceChannel",
    "split", "slice_axis", "expand_dims", "RNN", "LayerNorm",
    "InstanceNorm", "UpSampling", "SpatialTransformer", "MakeLoss", "L2Normalization",
    "sum", "mean", "exp", "log", "sqrt", "square", "relu", "sigmoid", "tanh", "where",
    "zeros", "ones", "Custom", "take", "pick", "one_hot", "Crop", "Pad", "ROIPooling",
    "MAERegressionOutput", "LogisticRegressionOutput", "SVMOutput", "smooth_l1",
}


class Symbol(_kt.sym.Symbol):
    """kvtrain's graph with MXNet's file format: tojson() and save() write
    MXNet's JSON graph, which load() and load_json() read back (as they
    read kvtrain's own text graphs)."""

    def tojson(self):
        return to_mxnet_json(self)

    def save(self, fname, remove_amp_cast=True):
        with open(fname, "w") as f:
            f.write(self.tojson())

    def __getitem__(self, index):
        return Symbol(_kt.sym.Symbol.__getitem__(self, index)._handle)

    def get_internals(self):
        raise NotInKvtrain("Symbol.get_internals", "build the sub-graph you need")


def _bool(v):
    return {"True": "true", "False": "false"}.get(v, v)


def _check_attrs(op_type, name, known, attrs):
    """MXNet attributes as kvtrain takes them: cuDNN hints dropped, MXNet's
    defaults of attributes kvtrain lacks dropped, other unknowns named."""
    out = {}
    for k, v in attrs.items():
        v = str(v) if not isinstance(v, str) else v
        if k in known:
            out[k] = v
        elif k in _HARMLESS or k.startswith("__"):
            continue
        elif k in _DEFAULT_ONLY:
            default, spellings = _DEFAULT_ONLY[k]
            if v not in spellings:
                raise NotInKvtrain("%s: %s=%s" % (name, k, v),
                                   "kvtrain's %s computes MXNet's default %s=%s only"
                                   % (op_type, k, default))
        else:
            out[k] = v  # kvtrain's core names it in its error
    return out


def Variable(name, attr=None, shape=None, lr_mult=None, wd_mult=None, dtype=None, init=None,
             stype=None, **kwargs):
    """An input, parameter or label named `name`."""
    if dtype not in (None, "float32") and getattr(dtype, "__name__", None) != "float32":
        raise NotInKvtrain("Variable %r: dtype %s" % (name, dtype),
                           "kvtrain's graphs compute in float32")
    if init is not None:
        raise NotInKvtrain("Variable %r: init= (a per-variable initializer)" % (name,),
                           "pass one initializer to Module.fit/init_params")
    if stype not in (None, "default"):
        raise NotInKvtrain("Variable %r: stype %r" % (name, stype),
                           "row-sparse parameters are kvtrain tables (docs/sparse.md)")
    hints = {k: v for k, v in (attr or {}).items() if k not in _VARIABLE_HINTS}
    return Symbol(_kt.sym.Variable(name, lr_mult=lr_mult, wd_mult=wd_mult, attr=hints)._handle)


var = Variable


def Group(symbols):
    return Symbol(_kt.sym.Group(symbols)._handle)


def _wrap(op_type, fn):
    desc = _lib.describe_op(op_type)
    known = {a[0] for a in desc["attrs"]} | set(desc["arguments"]) | {"name", "attr"}

    def op(*args, **kwargs):
        symbols = {k: v for k, v in kwargs.items() if isinstance(v, _kt.sym.Symbol)}
        rest = {k: v for k, v in kwargs.items() if k not in symbols}
        label = "%s %s" % (op_type, rest["name"]) if rest.get("name") else op_type
        checked = _check_attrs(op_type, label, known,
                               {k: v for k, v in rest.items() if k not in ("name", "attr")})
        for k, v in rest.items():
            if k in checked:
                checked[k] = v  # the caller's value, as kvtrain.sym takes it
        if "dtype" in checked and not isinstance(checked["dtype"], str):
            checked["dtype"] = np.dtype(checked["dtype"]).name  # np.float16 -> float16
        if "name" in rest:
            checked["name"] = rest["name"]
        return Symbol(fn(*args, **symbols, **checked)._handle)

    op.__name__ = op_type
    op.__doc__ = fn.__doc__
    return op


def _generate():
    module = sys.modules[__name__]
    for op_type in _lib.registered_ops():
        setattr(module, op_type, _wrap(op_type, getattr(_kt.sym, op_type)))


_generate()


# -- MXNet's JSON graph ------------------------------------------------------------
def to_mxnet_json(sym):
    """MXNet 1.x's JSON for a kvtrain graph: variables as "null" nodes
    (BatchNorm's moving statistics too, which MXNet takes as inputs), every
    attribute as a string, inputs as [node, output, 0]."""
    graph = sym._handle.graph()
    nodes, index = [], {}

    def add(node):
        index[node["name"]] = len(nodes)
        nodes.append(node)

    for name, op, attrs, inputs in graph["nodes"]:
        if not op:
            add(dict({"op": "null", "name": name, "inputs": []},
                     **({"attrs": dict(attrs)} if attrs else {})))
            continue
        entries = [[index[n], i, 0] for n, i in inputs]
        for aux in _lib.describe_op(op)["aux"]:
            add({"op": "null", "name": "%s_%s" % (name, aux), "inputs": []})
            entries.append([len(nodes) - 1, 0, 0])
        node = {"op": op, "name": name, "inputs": entries}
        if attrs:
            node["attrs"] = {k: {"true": "True", "false": "False"}.get(v, v)
                             for k, v in sorted(attrs.items())}
        add(node)
    return json.dumps({
        "nodes": nodes,
        "arg_nodes": [i for i, n in enumerate(nodes) if n["op"] == "null"],
        "heads": [[index[n], i, 0] for n, i in graph["outputs"]],
        "attrs": {"mxnet_version": ["int", 10901]},
    }, indent=2)


# Symbol arithmetic with a number (x + 1, 2 * x, 1 / x, -x), as MXNet names it.
_SCALAR_OPS = ("_plus_scalar", "_minus_scalar", "_rminus_scalar", "_mul_scalar",
               "_div_scalar", "_rdiv_scalar")


# MXNet's names of ops kvtrain has under another: symbol / symbol is
# elemwise_div there (equal shapes), broadcast_div here (a superset).
# broadcast_plus, broadcast_minus and broadcast_axes are MXNet's other names.
_ALIASES = {"elemwise_div": "broadcast_div", "_div": "broadcast_div",
            "broadcast_plus": "broadcast_add", "broadcast_minus": "broadcast_sub",
            "broadcast_axes": "broadcast_axis"}
for _alias, _op in _ALIASES.items():
    if _alias.startswith("broadcast_"):
        globals()[_alias] = globals()[_op]


def from_mxnet_json(text, what="the JSON graph"):
    """A Symbol from MXNet 1.x's JSON graph."""
    try:
        g = json.loads(text)
        nodes, heads = g["nodes"], g["heads"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError("%s is not MXNet's JSON graph: %s" % (what, e))
    built = []
    for i, node in enumerate(nodes):
        op, name = node.get("op"), node.get("name")
        attrs = node.get("attrs", node.get("attr", node.get("param", {}))) or {}
        if op == "null":
            mults = {k: str(v) for k, v in attrs.items() if k in ("__lr_mult__", "__wd_mult__")}
            built.append(_lib.Symbol.variable(name, mults))
            continue
        op = _ALIASES.get(op, op)
        if op not in _lib.registered_ops() and op not in _SCALAR_OPS:
            raise NotInKvtrain("%s: node %d (%s) is operator %s" % (what, i, name, op),
                               "kvtrain's operators are listed in docs/operators.md")
        desc = _lib.describe_op(op)
        known = {a[0] for a in desc["attrs"]}
        checked = {k: _bool(v) for k, v in
                   _check_attrs(op, "%s: node %d (%s %s)" % (what, i, op, name), known,
                                attrs).items()}
        inputs = node.get("inputs", [])
        # MXNet passes auxiliary states as the last inputs; kvtrain keeps them.
        ninputs = len(desc["arguments"]) if desc["arguments"] != ["arg0"] else len(inputs)
        extra = inputs[ninputs:]
        if len(extra) not in (0, len(desc["aux"])):
            raise ValueError("%s: node %d (%s, %s) has %d inputs; kvtrain's %s takes %d "
                             "(and %d auxiliary states)" % (what, i, name, op, len(inputs), op,
                                                            ninputs, len(desc["aux"])))
        handles = []
        for entry in inputs[:ninputs]:
            src, out = entry[0], entry[1]
            h = built[src]
            if nodes[src].get("op") != "null":
                h = h.output(out)
            handles.append(h)
        built.append(_lib.Symbol.op(op, name, handles, checked))
    outs = []
    for entry in heads:
        h = built[entry[0]]
        outs.append(h.output(entry[1]) if nodes[entry[0]].get("op") != "null" else h)
    return Symbol(outs[0] if len(outs) == 1 else _lib.Symbol.group(outs))


def load_json(json_str):
    """A graph from MXNet's JSON (or kvtrain's own text graph)."""
    if json_str.lstrip().startswith("{"):
        return from_mxnet_json(json_str)
    return Symbol(_kt.sym.load_json(json_str)._handle)


def load(fname):
    """A graph file: MXNet's -symbol.json, or kvtrain's -symbol.txt."""
    with open(fname) as f:
        text = f.read()
    if text.lstrip().startswith("{"):
        return from_mxnet_json(text, fname)
    return Symbol(_kt.sym.load(fname)._handle)


def __getattr__(name):
    if name in _NOT_HERE:
        raise NotInKvtrain("mx.sym.%s" % name,
                           "kvtrain's operators are listed in docs/operators.md")
    raise AttributeError("module 'mxnet.symbol' has no attribute %r" % (name,))
