"""kvtrain's MXNet face: mx.sym operators (arithmetic, broadcast_*, LRN,
Deconvolution, LeakyReLU & co.) against numpy in a Module, through MXNet's
JSON graph."""

import json
import os
import sys

import numpy as np
import pytest

from conftest import COMPAT, ROOT

sys.path.insert(0, COMPAT)

import mxnet as mx  # noqa: E402
from mxnet.base import NotInKvtrain  # noqa: E402

TESTDATA = os.path.join(ROOT, "python", "tests", "testdata")


def test_symbol_arithmetic_with_numbers_round_trips_through_mxnets_json():
    x = mx.sym.var("x")
    y = 1 - (x * 2 + 3) / 4
    g = json.loads(y.tojson())
    ops = {n["op"]: n.get("attrs", {}) for n in g["nodes"]}
    assert ops["_mul_scalar"] == {"scalar": "2.0"}
    assert set(ops) >= {"_plus_scalar", "_div_scalar", "_rminus_scalar"}
    back = mx.sym.load_json(y.tojson())
    assert back.tojson() == y.tojson()
    # As MXNet 1.9 writes a scalar op (with is_int).
    g["nodes"][[n["op"] for n in g["nodes"]].index("_mul_scalar")]["attrs"] = {
        "is_int": "False", "scalar": "2"}
    assert mx.sym.load_json(json.dumps(g)).infer_shape(x=(2, 3))[1] == [(2, 3)]
    # Symbol / symbol: MXNet writes elemwise_div, kvtrain reads it as broadcast_div.
    z = mx.sym.broadcast_add(x, mx.sym.var("y")) / x
    text = z.tojson().replace('"broadcast_div"', '"elemwise_div"')
    assert mx.sym.load_json(text).infer_shape(x=(2, 3), y=(1, 3))[1] == [(2, 3)]


def _expect_softmax_of_fc(mod, h):
    """The module's output is softmax(fc(h)) with its parameters fc_weight, fc_bias."""
    args, _ = mod.get_params()
    z = h @ args["fc_weight"].asnumpy().T + args["fc_bias"].asnumpy()
    want = np.exp(z - z.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(mod.get_outputs()[0].asnumpy(), want, rtol=1e-5)


def test_broadcast_ops_compute_as_numpy_in_a_module():
    d = mx.sym.var("data")
    col, row = mx.sym.Reshape(d, shape=(2, 3, 1)), mx.sym.Reshape(d, shape=(2, 1, 3))
    parts = [mx.sym.broadcast_maximum(col, row), mx.sym.broadcast_greater(col, row),
             mx.sym.broadcast_to(row, shape=(2, 3, 0)), mx.sym.broadcast_axes(col, axis=2, size=3),
             mx.sym.broadcast_power(col, row), mx.sym.broadcast_minus(col, row)]
    parts.append(mx.sym.broadcast_like(row, parts[0], lhs_axes=None))
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(total, num_hidden=4, name="fc"),
                               name="softmax")
    again = mx.sym.load_json(net.tojson())  # MXNet's JSON keeps every attribute
    assert again.tojson() == net.tojson()
    mod = mx.mod.Module(again)
    mod.bind(data_shapes=[("data", (2, 3))], label_shapes=[("softmax_label", (2,))],
             for_training=False)
    mod.init_params(initializer=mx.init.Uniform(0.5))
    x = np.array([[0.5, 1.5, 1.0], [2.0, 0.25, 2.0]], np.float32)
    mod.forward(mx.io.DataBatch([mx.nd.array(x)], [mx.nd.zeros((2,))]), is_train=False)
    c, r = x[:, :, None], x[:, None, :]
    h = (np.maximum(c, r) + (c > r) + np.broadcast_to(r, (2, 3, 3))
         + np.broadcast_to(c, (2, 3, 3)) + c ** r + (c - r)
         + np.broadcast_to(r, (2, 3, 3))).reshape(2, 9)
    _expect_softmax_of_fc(mod, h)


def test_lrn_computes_mxnets_formula_in_a_module():
    d = mx.sym.Reshape(mx.sym.var("data"), shape=(2, 5, 1, 2))
    lrn = mx.sym.LRN(d, nsize=3, alpha=0.3, beta=0.5, knorm=1.5, name="lrn")
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(lrn, num_hidden=3, name="fc"),
                               name="softmax")
    mod = mx.mod.Module(mx.sym.load_json(net.tojson()))
    mod.bind(data_shapes=[("data", (2, 10))], label_shapes=[("softmax_label", (2,))],
             for_training=False)
    mod.init_params(initializer=mx.init.Uniform(0.5))
    x = np.linspace(-2, 2, 20, dtype=np.float32).reshape(2, 10)
    mod.forward(mx.io.DataBatch([mx.nd.array(x)], [mx.nd.zeros((2,))]), is_train=False)
    a = x.reshape(2, 5, 1, 2).astype(np.float64)
    sq = np.pad(a * a, ((0, 0), (1, 1), (0, 0), (0, 0)))
    window = sq[:, 0:5] + sq[:, 1:6] + sq[:, 2:7]
    h = (a / (1.5 + 0.3 / 3 * window) ** 0.5).reshape(2, 10)
    _expect_softmax_of_fc(mod, h)


def test_deconvolution_spreads_each_pixel_over_its_kernel_in_a_module():
    d = mx.sym.Reshape(mx.sym.var("data"), shape=(2, 1, 2, 2))
    up = mx.sym.Deconvolution(d, kernel=(2, 2), stride=(2, 2), num_filter=2, name="up",
                              target_shape=(), workspace=512)
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(up, num_hidden=3, name="fc"),
                               name="softmax")
    g = json.loads(net.tojson())
    node = [n for n in g["nodes"] if n["op"] == "Deconvolution"][0]
    node["attrs"].update({"num_group": "1", "dilate": "(1, 1)", "adj": "(0, 0)"})
    mod = mx.mod.Module(mx.sym.load_json(json.dumps(g)))  # as MXNet writes it
    mod.bind(data_shapes=[("data", (2, 4))], label_shapes=[("softmax_label", (2,))],
             for_training=False)
    mod.init_params(initializer=mx.init.Uniform(0.5))
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    mod.forward(mx.io.DataBatch([mx.nd.array(x)], [mx.nd.zeros((2,))]), is_train=False)
    args, _ = mod.get_params()
    w = args["up_weight"].asnumpy()  # (1, 2, 2, 2): channels, num_filter, kh, kw
    # Stride 2 with a 2x2 kernel: each input pixel becomes its own 2x2 block.
    h = np.einsum("nij,fab->nfiajb", x.reshape(2, 2, 2), w[0]).reshape(2, 2 * 4 * 4)
    _expect_softmax_of_fc(mod, h)


def test_mxnet_json_with_what_kvtrain_lacks_is_refused_naming_the_node(tmp_path):
    graph = json.loads(open(os.path.join(TESTDATA, "mxnet_mlp_bn-symbol.json")).read())
    graph["nodes"][9] = {"op": "UpSampling", "name": "up1", "attrs": {"scale": "2"},
                         "inputs": [[8, 0, 0]]}
    with pytest.raises(NotInKvtrain, match="node 9 \\(up1\\) is operator UpSampling"):
        mx.sym.load_json(json.dumps(graph))
    graph["nodes"][9] = {"op": "Activation", "name": "relu1",
                         "attrs": {"act_type": "relu", "layout": "NHWC"}, "inputs": [[8, 0, 0]]}
    with pytest.raises(NotInKvtrain, match="node 9 \\(Activation relu1\\).*layout=NHWC"):
        mx.sym.load_json(json.dumps(graph))
    with pytest.raises(ValueError, match="is not MXNet's JSON graph"):
        mx.sym.load_json("{\"nodes\": 3}")


def test_leaky_relu_clip_and_softmax_train_and_round_trip():
    rng = np.random.RandomState(1)
    x = rng.randn(256, 6).astype(np.float32)
    y = (x[:, 0] * x[:, 1] > 0).astype(np.float32)
    data = mx.sym.Variable("data")
    h = mx.sym.LeakyReLU(data=mx.sym.FullyConnected(data=data, num_hidden=16, name="fc1"),
                         act_type="leaky", slope=0.1, name="lrelu")
    h = mx.sym.clip(data=h, a_min=-3.0, a_max=3.0, name="clip")
    h = mx.sym.LeakyReLU(data=h, act_type="elu", name="elu")
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(data=h, num_hidden=2, name="fc2"),
                               name="softmax")
    mod = mx.mod.Module(net)
    it = mx.io.NDArrayIter(x, y, 32, shuffle=True)
    mod.fit(it, num_epoch=30, optimizer_params={"learning_rate": 0.2, "momentum": 0.9},
            initializer=mx.init.Xavier())
    assert dict(mod.score(mx.io.NDArrayIter(x, y, 32), "acc"))["accuracy"] > 0.8
    assert mx.sym.load_json(net.tojson()).tojson() == net.tojson()
    probs = mx.sym.softmax(data=data, name="sm")
    assert probs.list_outputs() == ["sm_output"]
    with pytest.raises(Exception, match="prelu"):
        mx.sym.LeakyReLU(data=data, act_type="prelu")


def test_a_bilinear_deconvolution_upsamples_by_its_stride():
    d = mx.sym.Reshape(mx.sym.var("data"), shape=(1, 1, 3, 3))
    up = mx.sym.Deconvolution(d, kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=1,
                              name="up")
    net = mx.sym.LinearRegressionOutput(mx.sym.Flatten(up), name="out")
    mod = mx.mod.Module(net, label_names=("out_label",))
    mod.bind(data_shapes=[("data", (1, 9))], label_shapes=[("out_label", (1, 36))],
             for_training=False)
    mod.init_params(initializer=mx.init.Bilinear())
    k = np.array([0.25, 0.75, 0.75, 0.25], np.float32)
    np.testing.assert_allclose(mod.get_params()[0]["up_weight"].asnumpy()[0, 0],
                               np.outer(k, k))
    mod.forward(mx.io.DataBatch([mx.nd.ones((1, 9))], [mx.nd.zeros((1, 36))]), is_train=False)
    out = mod.get_outputs()[0].asnumpy().reshape(6, 6)
    np.testing.assert_allclose(out[1:5, 1:5], np.ones((4, 4)), rtol=1e-6)  # constant stays


def test_mixed_initializers_pick_by_name():
    data = mx.sym.Reshape(mx.sym.var("data"), shape=(2, 1, 2, 2))
    up = mx.sym.Deconvolution(data, kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=1,
                              name="up")
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(up, num_hidden=3, name="fc"),
                               name="softmax")
    mod = mx.mod.Module(net)
    mod.bind(data_shapes=[("data", (2, 4))], label_shapes=[("softmax_label", (2,))])
    mod.init_params(initializer=mx.init.Mixed(["up_.*", ".*"],
                                              [mx.init.Bilinear(), mx.init.Constant(0.5)]))
    args, _ = mod.get_params()
    k = np.array([0.25, 0.75, 0.75, 0.25], np.float32)
    np.testing.assert_allclose(args["up_weight"].asnumpy()[0, 0], np.outer(k, k))
    assert np.all(args["fc_weight"].asnumpy() == 0.5)
    assert np.all(args["fc_bias"].asnumpy() == 0)  # a bias starts at 0 whatever picks it
    mod.fit(mx.io.NDArrayIter(np.ones((4, 4), np.float32), np.zeros(4), 2), num_epoch=1,
            initializer=mx.init.Mixed(["up_.*", "fc_.*"], [mx.init.Bilinear(), mx.init.Xavier()]),
            force_init=True)
    with pytest.raises(ValueError, match="no pattern matches parameter 'fc_weight'"):
        mod.init_params(initializer=mx.init.Mixed(["up_.*"], [mx.init.Bilinear()]),
                        force_init=True)

