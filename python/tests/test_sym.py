"""kvtrain.sym: functions generated from the C++ op registry, composition,
shape inference against the C++ models, text save/load, errors."""

import os
import subprocess
import sys

import numpy as np
import pytest

import kvtrain as kt
from conftest import ROOT, TRAIN_MNIST_CC

sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
from train_mnist import lenet  # noqa: E402  (the Python example's LeNet)


def test_every_registered_op_has_a_function_with_its_attributes():
    for op in kt._lib.registered_ops():
        fn = getattr(kt.sym, op)
        assert fn.__name__ == op
    doc = kt.sym.Convolution.__doc__
    for attr in ("num_filter", "kernel", "stride", "pad", "no_bias"):
        assert attr in doc
    assert "num_filter : int >= 1" in doc and "required" in doc
    assert "no_bias : bool, default false" in doc
    assert "act_type : one of relu, sigmoid, tanh, softrelu" in kt.sym.Activation.__doc__


def test_missing_inputs_become_named_variables():
    fc = kt.sym.FullyConnected(kt.sym.Variable("data"), num_hidden=4, name="fc")
    assert fc.list_arguments() == ["data", "fc_weight", "fc_bias"]
    out = kt.sym.SoftmaxOutput(fc, name="softmax")
    assert out.list_arguments()[-1] == "softmax_label"
    assert out.list_outputs() == ["softmax_output"]
    w = kt.sym.Variable("shared_w")
    fc2 = kt.sym.FullyConnected(data=kt.sym.Variable("x"), weight=w, num_hidden=3, name="fc2",
                                no_bias=True)
    assert fc2.list_arguments() == ["x", "shared_w"]
    auto = kt.sym.FullyConnected(kt.sym.Variable("y"), num_hidden=2)
    assert auto.list_arguments()[1].startswith("fullyconnected")


def test_lenet_matches_the_cpp_model(tmp_path):
    # The C++ trainer saves its LeNet (engine/models.cc) with a checkpoint.
    prefix = str(tmp_path / "cc")
    r = subprocess.run([TRAIN_MNIST_CC, "--network", "lenet", "--num-epochs", "1",
                        "--num-examples", "200", "--model-prefix", prefix, "--disp-batches", "0"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    cc = kt.sym.load(prefix + "-symbol.txt")
    py = lenet()
    assert py.list_arguments() == cc.list_arguments()
    assert py.list_outputs() == cc.list_outputs()
    assert py.infer_shape(data=(8, 1, 28, 28)) == cc.infer_shape(data=(8, 1, 28, 28))
    args, outs, aux = py.infer_shape(data=(8, 1, 28, 28))
    assert dict(zip(py.list_arguments(), args))["fc1_weight"] == (500, 800)
    assert outs == [(8, 10)] and aux == []


def test_save_load_and_text_round_trip(tmp_path):
    net = lenet()
    path = str(tmp_path / "net.txt")
    net.save(path)
    back = kt.sym.load(path)
    assert back.tojson() == net.tojson()
    assert kt.sym.load_json(net.tojson()).list_arguments() == net.list_arguments()


def test_arithmetic_group_and_outputs():
    a, b = kt.sym.Variable("a"), kt.sym.Variable("b")
    for s in (a + b, a - b, a * b):
        assert s.list_arguments() == ["a", "b"]
        assert s.infer_shape(a=(2, 3), b=(2, 3))[1] == [(2, 3)]
    g = kt.sym.Group([a + b, a * b])
    assert len(g.list_outputs()) == 2
    assert g[1].list_outputs() == [g.list_outputs()[1]]
    with pytest.raises(TypeError, match="with a symbol or a number"):
        a + "1"
    assert (a / b).infer_shape(a=(2, 3), b=(2, 1))[1] == [(2, 3)]  # broadcast_div
    with pytest.raises(IndexError):
        g[2]


def test_arithmetic_with_numbers_is_mxnets_scalar_ops():
    data = kt.sym.Variable("data")
    fc = kt.sym.FullyConnected(data, num_hidden=3, name="fc")
    y = -((2 - fc * 3) / 4 + 1) + 1.0 / (fc + 10) - fc / 2 + 0.5 * fc
    assert {"_plus_scalar", "_rminus_scalar", "_mul_scalar", "_div_scalar",
            "_rdiv_scalar"} <= {op for _, op, _, _ in y._handle.graph()["nodes"]}
    net = kt.sym.LinearRegressionOutput(y, name="lro")
    mod = kt.mod.Module(net, label_names=["lro_label"])
    mod.bind([("data", (4, 5))], [("lro_label", (4, 3))])
    rng = np.random.RandomState(0)
    w, b = rng.randn(3, 5).astype(np.float32), rng.randn(3).astype(np.float32)
    mod.init_params(arg_params={"fc_weight": w, "fc_bias": b})
    x = rng.randn(4, 5).astype(np.float32)

    class Batch(object):
        data, label = [x], [np.zeros((4, 3), np.float32)]
    mod.forward(Batch(), is_train=False)
    f = x @ w.T + b
    want = -((2 - f * 3) / 4 + 1) + 1.0 / (f + 10) - f / 2 + 0.5 * f
    assert np.allclose(mod.get_outputs()[0], want, rtol=1e-5, atol=1e-6)
    # Broadcasting: a (4, 1) column against the (4, 3) layer output.
    s = kt.sym.FullyConnected(data, num_hidden=1, name="col")
    net = kt.sym.LinearRegressionOutput(kt.sym.broadcast_sub(
        kt.sym.broadcast_mul(fc, s), s) / (fc * fc + 1), name="lro")
    mod = kt.mod.Module(net, label_names=["lro_label"])
    mod.bind([("data", (4, 5))], [("lro_label", (4, 3))])
    w2, b2 = rng.randn(1, 5).astype(np.float32), rng.randn(1).astype(np.float32)
    mod.init_params(arg_params={"fc_weight": w, "fc_bias": b, "col_weight": w2,
                                "col_bias": b2})
    mod.forward(Batch(), is_train=False)
    sv = x @ w2.T + b2
    assert np.allclose(mod.get_outputs()[0], (f * sv - sv) / (f * f + 1), rtol=1e-5,
                       atol=1e-6)
    # log_softmax along the last axis.
    net = kt.sym.LinearRegressionOutput(kt.sym.log_softmax(fc), name="lro")
    mod = kt.mod.Module(net, label_names=["lro_label"])
    mod.bind([("data", (4, 5))], [("lro_label", (4, 3))])
    mod.init_params(arg_params={"fc_weight": w, "fc_bias": b})
    mod.forward(Batch(), is_train=False)
    m = f.max(axis=1, keepdims=True)
    want = f - m - np.log(np.exp(f - m).sum(axis=1, keepdims=True))
    assert np.allclose(mod.get_outputs()[0], want, rtol=1e-5, atol=1e-6)


def test_mistakes_raise_at_once_with_the_cores_message():
    data = kt.sym.Variable("data")
    with pytest.raises(ValueError, match=r'unknown attribute "num_hiden"'):
        kt.sym.FullyConnected(data, num_hidden=3, num_hiden=4, name="fc")
    with pytest.raises(kt.KVTrainError, match=r"act_type"):
        kt.sym.Activation(data, act_type="relux", name="act")
    with pytest.raises(TypeError, match=r"at most 3 inputs"):
        kt.sym.FullyConnected(data, data, data, data, num_hidden=2)
    with pytest.raises(TypeError, match=r"must be a Symbol"):
        kt.sym.FullyConnected(data=3, num_hidden=2)
    fc = kt.sym.FullyConnected(data, num_hidden=3, name="fc")
    with pytest.raises(kt.KVTrainError, match=r"fc"):
        fc.infer_shape(data=(2, 5), fc_weight=(4, 7))  # 3 hidden units, 5 features
    with pytest.raises(kt.KVTrainError, match=r"nope"):
        fc.infer_shape(nope=(2, 3))
    with pytest.raises(kt.KVTrainError):
        kt.sym.load(os.path.join("/nonexistent", "net.txt"))
