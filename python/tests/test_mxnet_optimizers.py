"""kvtrain's MXNet face: mx.optimizer's rules checked step by step against
MXNet 1.9's Python updates, per-parameter rates (param_idx2name, lr_mult,
wd_mult), schedules."""

import json
import sys

import numpy as np
import pytest

from conftest import COMPAT

sys.path.insert(0, COMPAT)

import mxnet as mx  # noqa: E402
from mxnet.base import NotInKvtrain  # noqa: E402


def _mxnet_update(name, kw, w, g, state, t):
    """One step of MXNet 1.9's Python update rule (optimizer.py), in numpy."""
    lr = kw.get("learning_rate", 0.002 if name == "adamax" else 0.01)
    wd = kw.get("wd", 0.0)
    rescale, clip = kw.get("rescale_grad", 1.0), kw.get("clip_gradient")
    if name == "signum":
        mom = kw.get("momentum", 0.9)
        if mom == 0:  # signsgd_update
            return (1 - lr * wd) * w - lr * np.sign(g)
        gc = rescale * g if clip is None else np.clip(rescale * g, -clip, clip)
        state[0] = mom * state[0] - (1 - mom) * wd * w - (1 - mom) * gc
        return (1 - lr * kw.get("wd_lh", 0.0)) * w + lr * np.sign(state[0])
    if name == "adamax":
        b1, b2 = kw.get("beta1", 0.9), kw.get("beta2", 0.999)
        lr_t = lr / (1. - b1 ** t)
        gw = g * rescale + wd * w
        if clip is not None:
            gw = np.clip(gw, -clip, clip)
        state[0] = b1 * state[0] + (1. - b1) * gw
        state[1] = np.maximum(b2 * state[1], np.abs(gw))
        return w - lr_t * state[0] / state[1]
    assert name == "adadelta"
    rho, eps = kw.get("rho", 0.9), kw.get("epsilon", 1e-5)
    gc = g * rescale if clip is None else np.clip(g * rescale, -clip, clip)
    state[0] = rho * state[0] + (1. - rho) * gc * gc
    delta = np.sqrt(state[1] + eps) / np.sqrt(state[0] + eps) * gc
    state[1] = rho * state[1] + (1. - rho) * delta * delta
    return w - (delta + wd * w)


@pytest.mark.parametrize("name,kw", [
    ("signum", {"learning_rate": 0.05, "wd": 0.01, "wd_lh": 0.02, "rescale_grad": 0.5}),
    ("signum", {"learning_rate": 0.05, "momentum": 0.0, "wd": 0.1}),
    ("adamax", {"wd": 0.01, "clip_gradient": 0.6}),
    ("adadelta", {"rho": 0.8, "wd": 0.001, "rescale_grad": 2.0}),
])
def test_signum_adamax_and_adadelta_follow_mxnets_updates(name, kw):
    kv = mx.kv.create("local")
    kv.set_optimizer(mx.optimizer.create(name, **kw))
    w = np.array([0.5, -1.5, 2.0, 0.0], np.float64)
    kv.init(3, mx.nd.array(w.astype(np.float32)))
    state = [np.zeros(4), np.zeros(4)]
    out = mx.nd.zeros((4,))
    for t in range(1, 6):
        g = np.array([0.3 * t, -0.7, 0.1 - t, 0.25 * (-1) ** t])
        kv.push(3, mx.nd.array(g.astype(np.float32)))
        kv.pull(3, out=out)
        w = _mxnet_update(name, kw, w, g, state, t)
        np.testing.assert_allclose(out.asnumpy(), w, rtol=1e-5, atol=1e-6,
                                   err_msg="%s step %d" % (name, t))


def test_biases_take_no_weight_decay_as_in_mxnet():
    # Given the parameters' names, MXNet decays only *_weight and *_gamma.
    names = {0: "fc_weight", 1: "fc_bias", 2: "bn_gamma", 3: "bn_beta"}
    opt = mx.optimizer.create("sgd", learning_rate=1.0, wd=0.1, rescale_grad=1.0,
                              param_idx2name=names)
    opt.set_lr_mult({"fc_weight": 2.0})
    kv = mx.kv.create("local")
    kv.set_optimizer(opt)
    for key in names:
        kv.init(key, mx.nd.ones((2,)))
        kv.push(key, mx.nd.full((2,), 0.5))
    out = mx.nd.zeros((2,))
    got = []
    for key in names:
        kv.pull(key, out=out)
        got.append(float(out.asnumpy()[0]))
    # w -= lr * lr_mult * (g + wd * wd_mult * w)
    np.testing.assert_allclose(got, [1 - 2 * (0.5 + 0.1), 0.5, 1 - (0.5 + 0.1), 0.5], rtol=1e-6)
    # A Module given the optimizer's name passes the names, as MXNet's does.
    mod = mx.mod.Module(mx.sym.SoftmaxOutput(mx.sym.FullyConnected(
        mx.sym.var("data"), num_hidden=2, name="fc"), name="softmax"))
    mod.bind(data_shapes=[("data", (4, 3))], label_shapes=[("softmax_label", (4,))])
    mod.init_params()
    mod.init_optimizer(optimizer="sgd", optimizer_params={"wd": 0.01})
    assert mod._optimizer.params["wd_mult"] == {"fc_bias": 0.0, "1": 0.0}


def test_a_variable_with_lr_mult_zero_stays_frozen_in_fit():
    w1 = mx.sym.Variable("fc1_weight", lr_mult=0.0)
    b2 = mx.sym.Variable("fc2_bias", wd_mult=0.5)
    h = mx.sym.Activation(mx.sym.FullyConnected(mx.sym.var("data"), weight=w1, num_hidden=8,
                                                name="fc1"), act_type="relu")
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(h, bias=b2, num_hidden=3, name="fc2"),
                               name="softmax")
    g = json.loads(net.tojson())  # MXNet's JSON keeps the multipliers
    attrs = {n["name"]: n.get("attrs", {}) for n in g["nodes"] if n["op"] == "null"}
    assert attrs["fc1_weight"] == {"__lr_mult__": "0.0"}
    assert attrs["fc2_bias"] == {"__wd_mult__": "0.5"}
    net = mx.sym.load_json(json.dumps(g))
    rng = np.random.RandomState(0)
    x = rng.randn(64, 5).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.float32) + (x[:, 1] > 0)
    mod = mx.mod.Module(net)
    mod.bind(data_shapes=[("data", (16, 5))], label_shapes=[("softmax_label", (16,))])
    mod.init_params(initializer=mx.init.Xavier())
    before = {k: v.asnumpy().copy() for k, v in mod.get_params()[0].items()}
    mod.fit(mx.io.NDArrayIter(x, y, 16), num_epoch=2, optimizer_params={"learning_rate": 0.5})
    after = {k: v.asnumpy() for k, v in mod.get_params()[0].items()}
    assert np.array_equal(after["fc1_weight"], before["fc1_weight"])
    assert not np.array_equal(after["fc1_bias"], before["fc1_bias"])
    assert not np.array_equal(after["fc2_weight"], before["fc2_weight"])
    assert mod._optimizer.params["lr_mult"] == {"fc1_weight": 0.0, "0": 0.0}


def test_optimizers_take_mxnets_names_arguments_and_defaults():
    adam = mx.optimizer.create("adam")
    assert adam.learning_rate == 0.001  # MXNet's, where kvtrain's own is 0.01
    assert adam._kvtrain.params["learning_rate"] == 0.001
    sgd = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=1e-4, multi_precision=True,
                           param_idx2name={0: "fc_weight"})
    assert sgd._kvtrain.params == {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4}
    rmsprop = mx.optimizer.create("rmsprop", gamma1=0.95, gamma2=0.9, epsilon=1e-7)
    assert rmsprop._kvtrain.params == {"learning_rate": 0.001, "gamma1": 0.95, "epsilon": 1e-7}
    with pytest.raises(NotInKvtrain, match="centered=True"):
        mx.optimizer.create("rmsprop", centered=True)
    with pytest.raises(NotInKvtrain, match="optimizer 'nadam'"):
        mx.optimizer.create("nadam")
    signum = mx.optimizer.create("signum", wd_lh=0.01)
    assert signum._kvtrain.params == {"learning_rate": 0.01, "momentum": 0.9, "wd_lh": 0.01}
    assert mx.optimizer.Adamax().learning_rate == 0.002
    with pytest.raises(TypeError, match="'adadelta' got argument\\(s\\) it does not take: beta1"):
        mx.optimizer.create("adadelta", beta1=0.9)
    with pytest.raises(TypeError, match="'sgd' got argument\\(s\\) it does not take: beta1"):
        mx.optimizer.create("sgd", beta1=0.9)
    with pytest.raises(NotInKvtrain, match="mx.optimizer.register"):
        mx.optimizer.register(object)

    class Mine(object):
        pass

    with pytest.raises(NotInKvtrain, match="an optimizer of type Mine"):
        mx.kv.create("local").set_optimizer(Mine())
    with pytest.raises(NotInKvtrain, match="kvstore type 'horovod'"):
        mx.kv.create("horovod")


def test_schedules_with_warmup_run_in_the_store():
    sched = mx.lr_scheduler.CosineScheduler(max_update=4, base_lr=9, final_lr=0,
                                            warmup_steps=2, warmup_begin_lr=0.5,
                                            warmup_mode="constant")
    kv = mx.kv.create("local")
    kv.init(0, mx.nd.zeros((1,)))
    kv.set_optimizer(mx.optimizer.create("sgd", learning_rate=1.0, lr_scheduler=sched))
    steps, before = [], 0.0
    for _ in range(6):
        kv.push(0, mx.nd.ones((1,)))
        out = mx.nd.zeros((1,))
        kv.pull(0, out=out)
        steps.append(round(before - out.asscalar(), 6))
        before = out.asscalar()
    # Update 1 warms up at 0.5; 2..4 follow the half cosine from the base
    # rate (the optimizer's 1.0, not base_lr) to 0 at update 4, then stay.
    assert steps == [0.5, 1.0, 0.5, 0.0, 0.0, 0.0]
    poly = mx.lr_scheduler.PolyScheduler(10, 0.1, 2)
    assert (poly.max_update, poly.pwr, poly.final_lr) == (10, 2.0, 0.0)
    with pytest.raises(TypeError, match="does not take: cycle"):
        mx.lr_scheduler.FactorScheduler(5, cycle=2)
