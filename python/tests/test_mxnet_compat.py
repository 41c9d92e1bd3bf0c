"""kvtrain's MXNet face (python/compat/mxnet): mx.nd, mx.kv, mx.optimizer,
mx.random and mx.test_utils as MXNet scripts call them, on local stores and
in a real 2 worker + 2 server job (mxnet_dist_kvstore.py, written as
MXNet's nightly store tests are)."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import JOB_ENV, PY, ROOT, launch, lines_with

COMPAT = os.path.join(ROOT, "python", "compat")
sys.path.insert(0, COMPAT)

import mxnet as mx  # noqa: E402
from mxnet.base import NotInKvtrain  # noqa: E402


def test_mx_is_kvtrains_face_and_says_so():
    assert mx.__kvtrain__ and mx.__file__.startswith(COMPAT)
    assert mx.nd is mx.ndarray and mx.kv is mx.kvstore
    assert mx.cpu() == mx.Context("cpu", 0) and repr(mx.gpu(1)) == "gpu(1)"


def test_ndarray_keeps_mxnets_dtypes_and_indexing():
    # Creation defaults to float32, also from numpy's float64.
    assert mx.nd.array(np.random.rand(2, 2)).dtype == np.float32
    assert mx.nd.array([1, 2]).dtype == np.float32
    assert mx.nd.ones((2,), dtype="float16").dtype == np.float16
    assert mx.nd.array(mx.nd.ones((2,), dtype="int32")).dtype == np.int32
    # Arithmetic with scalars keeps the array's dtype.
    h = mx.nd.ones((2, 3), dtype="float16") * 3 + 1
    assert h.dtype == np.float16 and h.asnumpy().tolist() == [[4] * 3] * 2
    assert (2 - mx.nd.ones((2,))).asnumpy().tolist() == [1, 1]
    assert (mx.nd.ones((2,)) / 4).asnumpy().tolist() == [0.25, 0.25]
    # Integer indexing of a 1-D array keeps shape (1,), as MXNet 1.x.
    z = mx.nd.zeros((2, 3))
    assert z[0].shape == (3,) and z[0][0].shape == (1,)
    assert z[0][0].asnumpy()[0] == 0 and z[1][2].asscalar() == 0
    # Rows and slices assign in place; a slice is a view.
    z[1] = 5
    z[0, 1:] = mx.nd.array([7, 8])
    assert z.asnumpy().tolist() == [[0, 7, 8], [5, 5, 5]]
    view = z[1:]
    view += 1
    assert z.asnumpy()[1].tolist() == [6, 6, 6]
    # Comparisons are arrays of 0 and 1 in the operands' dtype.
    c = mx.nd.array([1, 2, 3]) > 1
    assert c.dtype == np.float32 and c.asnumpy().tolist() == [0, 1, 1]
    assert mx.nd.zeros((2, 3, 4)).reshape((0, -1)).shape == (2, 12)
    with pytest.raises(ValueError, match="reshape: 0 at position 1 copies no dimension of \\(4,\\)"):
        mx.nd.arange(0, 4).reshape((2, 0))
    assert mx.nd.arange(0, 6).reshape(-1, 3).shape == (2, 3)
    assert mx.nd.ones((2, 2)).sum().asscalar() == 4
    assert mx.nd.ones((3,)).astype("uint8").dtype == np.uint8
    out = mx.nd.zeros((2,), dtype="float16")
    mx.nd.ones((2,)).copyto(out)
    assert out.dtype == np.float16 and out.asnumpy().tolist() == [1, 1]
    mx.nd.waitall()
    z.wait_to_read()
    with pytest.raises(TypeError, match="dtype complex64 is not one MXNet has"):
        mx.nd.zeros((2,), dtype="complex64")


def test_row_sparse_arrays():
    d = mx.nd.zeros((4, 2))
    d[2] = 3
    r = d.tostype("row_sparse")
    assert r.stype == "row_sparse" and r.shape == (4, 2)
    assert r.indices.asnumpy().tolist() == [2] and r.data.asnumpy().tolist() == [[3, 3]]
    assert (r - 3).asnumpy()[2].tolist() == [0, 0]
    assert r.tostype("default").asnumpy().tolist() == d.asnumpy().tolist()
    s = mx.nd.sparse.row_sparse_array(([[1, 1], [2, 2]], [3, 0]), shape=(4, 2))
    assert s.indices.asnumpy().tolist() == [0, 3]
    assert s.asnumpy()[0].tolist() == [2, 2]
    assert mx.nd.zeros((3, 2), stype="row_sparse").asnumpy().sum() == 0
    with pytest.raises(NotInKvtrain, match="csr_matrix"):
        mx.nd.sparse.csr_matrix(([1], [0], [0, 1]), shape=(1, 1))
    with pytest.raises(NotInKvtrain, match="stype 'csr'"):
        d.tostype("csr")


def test_local_store_with_float16_keys_and_the_test_optimizer():
    kv = mx.kv.create("local")
    kv.init("3", mx.nd.ones((2, 3)))
    kv.init("4", mx.nd.ones((2, 3), dtype="float16"))
    kv.set_optimizer(mx.optimizer.create("test", rescale_grad=2, multi_precision=True))
    # Two values for one key (devices) are summed before the update.
    kv.push("3", [mx.nd.ones((2, 3)), mx.nd.ones((2, 3)) * 2])
    out = mx.nd.zeros((2, 3))
    kv.pull("3", out=out)
    assert out.asnumpy().tolist() == [[7] * 3] * 2  # 1 + 2 * (1 + 2)
    kv.push("4", mx.nd.ones((2, 3), dtype="float16") * 0.5)
    half = mx.nd.zeros((2, 3), dtype="float16")
    kv.pull("4", out=half)
    assert half.dtype == np.float16 and half.asnumpy().tolist() == [[2] * 3] * 2
    assert kv.is_capable(mx.kvstore.OPTIMIZER)
    with pytest.raises(ValueError, match="unknown capability"):
        kv.is_capable("gpu_direct")


def test_local_store_row_sparse_keys_start_as_mxnets_ones():
    kv = mx.kv.create("local")
    kv.init("9", mx.nd.ones((4, 3)).tostype("row_sparse"))
    g = mx.nd.zeros((4, 3))
    g[1] = 2
    kv.push("9", g.tostype("row_sparse"))
    got = mx.nd.zeros((4, 3), stype="row_sparse")
    kv.row_sparse_pull("9", out=got, row_ids=mx.nd.array([3, 1, 1]))
    assert got.indices.asnumpy().tolist() == [1, 3]
    # Without an optimizer the pushed row becomes the value (MXNet's rule).
    assert got.asnumpy().tolist() == [[0] * 3, [2] * 3, [0] * 3, [1] * 3]
    kv.row_sparse_pull("9", out=got, row_ids=mx.nd.array([]))
    assert got.indices.asnumpy().size == 0 and got.asnumpy().sum() == 0
    uneven = mx.nd.ones((4, 3))
    uneven[0] = 2
    with pytest.raises(NotInKvtrain, match="key '5': a row-sparse key holding arbitrary rows"):
        kv.init("5", uneven.tostype("row_sparse"))
    with pytest.raises(TypeError, match="out must be a RowSparseNDArray"):
        kv.row_sparse_pull("9", out=mx.nd.zeros((4, 3)), row_ids=mx.nd.array([1]))


def test_a_python_updater_on_a_local_store():
    kv = mx.kv.create("local")
    seen = []

    def updater(key, grad, weight):
        seen.append((key, grad.asnumpy().tolist()))
        weight -= grad * 0.5

    kv._set_updater(updater)
    kv.init(1, mx.nd.ones((2,)))
    kv.push(1, [mx.nd.ones((2,)) * 3, mx.nd.ones((2,))])
    out = mx.nd.zeros((2,))
    kv.pull(1, out=out)
    assert seen == [(1, [4.0, 4.0])]  # the store summed the two values
    assert out.asnumpy().tolist() == [-1, -1]


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


def test_random_and_test_utils():
    mx.random.seed(7)
    a = mx.random.uniform(shape=(3,)).asnumpy()
    mx.random.seed(7)
    assert np.array_equal(a, mx.random.uniform(shape=(3,)).asnumpy())
    mx.test_utils.assert_almost_equal(mx.nd.ones((2,)), np.ones(2) + 1e-7)
    with pytest.raises(AssertionError, match="differ beyond"):
        mx.test_utils.assert_almost_equal(mx.nd.ones((2,)), np.array([1, 1.1]))
    mx.test_utils.assert_exception(int, ValueError, "x")
    with pytest.raises(AssertionError, match="did not raise"):
        mx.test_utils.assert_exception(int, ValueError, "1")


@pytest.mark.parametrize("part", ["dense", "sparse", "2bit"])
def test_mxnet_style_closed_form_job(part):
    path = os.path.join(ROOT, "python", "tests", "mxnet_dist_kvstore.py")
    env = ["--env", "PYTHONPATH=%s:%s" % (COMPAT, os.path.join(ROOT, "python"))]
    code, out = launch(["-n", "2", "-s", "2"] + JOB_ENV + env + [PY, path, "--part", part])
    assert code == 0, out[-3000:]
    assert len(lines_with(out, ": %s done" % part)) == 2, out[-3000:]


# -- the step-by-step Module loop (mxnet_module_steps.py: forward,
# update_metric, backward, update per batch) -------------------------------
STEPS = os.path.join(ROOT, "python", "tests", "mxnet_module_steps.py")


def test_module_step_by_step_trains_in_one_process(tmp_path):
    r = subprocess.run([PY, STEPS, "--kv-store", "local", "--out", str(tmp_path / "p.npz")],
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    acc = [float(a) for a in re.findall(r"Training \('accuracy', ([0-9.]+)\)", r.stdout)]
    assert len(acc) == 2 and acc[1] > acc[0] > 0.5, r.stdout
    val = float(re.findall(r"validation accuracy ([0-9.]+)", r.stdout)[0])
    assert val > 0.7, r.stdout
    params = np.load(str(tmp_path / "p.npz"))
    assert sorted(params) == ["fc1_bias", "fc1_weight", "fc2_bias", "fc2_weight"]


def test_module_step_by_step_under_dist_sync_keeps_the_workers_equal(tmp_path):
    out = str(tmp_path / "p.npz")
    env = ["--env", "PYTHONPATH=%s:%s" % (COMPAT, os.path.join(ROOT, "python"))]
    code, text = launch(["-n", "2", "-s", "2"] + JOB_ENV + env + [
        PY, STEPS, "--kv-store", "dist_sync", "--batch-size", "50", "--out", out])
    assert code == 0, text[-3000:]
    vals = [float(v) for v in re.findall(r"validation accuracy ([0-9.]+)", text)]
    assert len(vals) == 2 and vals[0] == vals[1] and vals[0] > 0.7, text[-3000:]
    a, b = (np.load(out.replace(".npz", ".%d.npz" % r)) for r in (0, 1))
    for name in a:
        assert np.array_equal(a[name], b[name]), name


# -- fit fed by a Python DataIter subclass (mxnet_python_iter.py) ---------------
PY_ITER = os.path.join(ROOT, "python", "tests", "mxnet_python_iter.py")
ITER_LINE = re.compile(r"resets (\d+) batches (\d+) accuracy ([0-9.]+)")


def test_fit_reads_a_python_data_iter_in_one_process(tmp_path):
    r = subprocess.run([PY, PY_ITER, "--kv-store", "local"], env=_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    resets, batches, acc = ITER_LINE.search(r.stdout).groups()
    # reset() as each of the 3 epochs starts; every one of its 30 batches.
    assert (int(resets), int(batches)) == (3, 90) and float(acc) > 0.85, r.stdout


def test_fit_reads_python_data_iters_under_dist_sync(tmp_path):
    out = str(tmp_path / "p.npz")
    env = ["--env", "PYTHONPATH=%s:%s" % (COMPAT, os.path.join(ROOT, "python"))]
    code, text = launch(["-n", "2", "-s", "1"] + JOB_ENV + env + [
        PY, PY_ITER, "--kv-store", "dist_sync", "--out", out])
    assert code == 0, text[-3000:]
    found = ITER_LINE.findall(text)
    assert len(found) == 2 and all(b == "90" and float(a) > 0.85 for _, b, a in found), text
    a, b = (np.load(out.replace(".npz", ".%d.npz" % r)) for r in (0, 1))
    for name in a:
        assert np.array_equal(a[name], b[name]), name


def test_python_data_iters_of_unequal_length_under_dist_sync_name_the_short_one():
    # Worker 1 has 25 batches an epoch, worker 0 30: worker 1 finishes first,
    # and worker 0's next step fails at once naming it (not after
    # KVTRAIN_KVSTORE_TIMEOUT, 600 s).
    env = ["--env", "PYTHONPATH=%s:%s" % (COMPAT, os.path.join(ROOT, "python"))]
    code, text = launch(["-n", "2", "-s", "1"] + JOB_ENV + env + [
        PY, PY_ITER, "--kv-store", "dist_sync", "--num-epochs", "1",
        "--last-worker-batches", "25"])
    assert code != 0, text[-3000:]
    assert "worker 1 finished (KVStore::Finalize) after pushing it" in text, text[-3000:]


def test_a_python_data_iter_that_fails_stops_fit_naming_the_problem():
    class Broken(mx.io.DataIter):
        def __init__(self, shape, fail):
            super().__init__(4)
            self.provide_data = [mx.io.DataDesc("data", (4, 3))]
            self.provide_label = [mx.io.DataDesc("softmax_label", (4,))]
            self.shape, self.fail = shape, fail

        def next(self):
            if self.fail:
                raise IOError("record 7 of the reader is corrupt")
            return mx.io.DataBatch([mx.nd.zeros(self.shape)], [mx.nd.zeros((4,))], pad=0)

    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2,
                                                     name="fc"), name="softmax")
    with pytest.raises(Exception, match=r"batch 0 has data of shape \(4, 5\), its "
                                        r"provide_data says \(4, 3\)"):
        mx.mod.Module(net).fit(Broken((4, 5), False), num_epoch=1)
    with pytest.raises(Exception, match="record 7 of the reader is corrupt"):
        mx.mod.Module(net).fit(Broken((4, 3), True), num_epoch=1)


def test_module_step_by_step_refuses_what_it_cannot_do():
    mod = mx.mod.Module(mx.sym.SoftmaxOutput(mx.sym.FullyConnected(
        mx.sym.var("data"), num_hidden=4, name="fc"), name="softmax"))
    mod.bind(data_shapes=[("data", (2, 3))], label_shapes=[("softmax_label", (2,))])
    mod.init_params()
    batch = mx.io.DataBatch([mx.nd.ones((2, 3))], [mx.nd.zeros((2,))])
    mod.forward(batch, is_train=True)
    with pytest.raises(NotInKvtrain, match="out_grads"):
        mod.backward(out_grads=[mx.nd.ones((2, 4))])
    with pytest.raises(NotInKvtrain, match="merge_multi_context=False"):
        mod.get_outputs(merge_multi_context=False)
    assert mod.get_outputs()[0].shape == (2, 4)
    with pytest.raises(RuntimeError, match="update before init_optimizer"):
        mod.backward()
        mod.update()


# -- an MXNet-shaped training script (mxnet_scripts/: train_mnist.py with
# common/fit.py and symbols/, kvtrain's own code making MXNet's calls) ----------
SCRIPTS = os.path.join(ROOT, "python", "tests", "mxnet_scripts")
MNIST = "/usr/share/datasets/fashion-mnist"


@pytest.fixture
def workdir(tmp_path):
    """A working directory with data/ as MXNet's train_mnist.py expects it."""
    (tmp_path / "data").mkdir()
    for f in os.listdir(MNIST):
        os.symlink(os.path.join(MNIST, f), str(tmp_path / "data" / f))
    return str(tmp_path)


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = "%s:%s" % (COMPAT, os.path.join(ROOT, "python"))
    return env


def train_mnist(workdir, *flags, launch_args=None, timeout=300):
    argv = [PY, os.path.join(SCRIPTS, "train_mnist.py")] + list(flags)
    if launch_args is not None:
        argv = [PY, os.path.join(ROOT, "tracker", "launch.py")] + launch_args + argv
    r = subprocess.run(argv, cwd=workdir, env=_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return r.returncode, r.stdout


def validation(out):
    return [float(v) for v in re.findall(r"Validation-accuracy=([0-9.]+)", out)]


def test_mxnet_train_mnist_trains_lenet_in_one_process(workdir):
    code, out = train_mnist(workdir, "--network", "lenet", "--num-epochs", "1",
                            "--num-examples", "10000", "--kv-store", "local", "--top-k", "3",
                            "--loss", "ce,nll")
    assert code == 0, out[-3000:]
    # fit's metrics: accuracy, top-3, and both losses (one value, two names).
    line = [l for l in out.splitlines() if "Time cost" in l][-1]
    for name in ("Validation-accuracy", "Validation-top_k_accuracy_3",
                 "Validation-cross-entropy", "Validation-nll-loss"):
        assert name + "=" in line, line
    # One epoch of 10,000 examples in an unseeded order: 0.69 to 0.80 seen.
    assert validation(out)[-1] >= 0.60, line
    assert "Speed:" in out and "samples/sec\taccuracy=" in out  # the Speedometer


def test_mxnet_train_mnist_under_dist_sync_matches_kvtrains_example(workdir):
    jobs = ["-n", "2", "-s", "2", "--launcher", "local"] + JOB_ENV
    code, out = train_mnist(workdir, "--num-epochs", "2", "--kv-store", "dist_sync",
                            launch_args=jobs)
    assert code == 0, out[-3000:]
    # Every worker reads all the data, resized to its share, as in MXNet.
    assert len(lines_with(out, "Resizing training data to 469 batches per machine")) == 2
    face = validation(out)
    # The workers' shuffles are unseeded (as in MXNet): after 2 epochs
    # 0.809 to 0.849 were seen; kvtrain's example (seeded) gave 0.842.
    assert len(face) == 4 and face[-1] >= 0.78, out[-2000:]
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([PY, os.path.join(ROOT, "tracker", "launch.py")] + jobs +
                       [PY, os.path.join(ROOT, "examples", "python", "train_mnist.py"),
                        "--num-epochs", "2", "--kv-store", "dist_sync", "--batch-size", "64",
                        "--lr", "0.05"],
                       cwd=workdir, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]
    own = validation(r.stdout)
    assert face[-1] >= own[-1] - 0.05, (face, own)


def test_mxnet_train_mnist_checkpoints_resumes_and_reads_only(workdir):
    small = ["--num-examples", "2000", "--kv-store", "local"]
    os.mkdir(os.path.join(workdir, "ck"))  # MXNet's fit.py expects it too
    code, out = train_mnist(workdir, "--num-epochs", "2", "--model-prefix", "ck/m",
                            "--save-period", "2", *small)
    assert code == 0, out[-3000:]
    files = sorted(os.listdir(os.path.join(workdir, "ck")))
    assert files == ["m-0002.params", "m-symbol.json"], files  # MXNet's files
    code, out = train_mnist(workdir, "--num-epochs", "3", "--load-epoch", "2",
                            "--model-prefix", "ck/m", *small)
    assert code == 0, out[-3000:]
    assert "Loaded model ck/m_0002.params" in out
    assert re.search(r"^Epoch\[2\] Train-accuracy", out, re.M) and "Epoch[1]" not in out
    code, out = train_mnist(workdir, "--test-io", "1", "--disp-batches", "10", *small)
    assert code == 0 and "Batch [29]\tSpeed:" in out, out[-2000:]
    for init in ("xavier", "msra", "normal", "uniform", "zero", "one", "orthogonal"):
        code, out = train_mnist(workdir, "--num-epochs", "1", "--initializer", init, *small)
        assert code == 0 and validation(out), (init, out[-2000:])
    code, out = train_mnist(workdir, "--num-epochs", "2", "--optimizer", "rmsprop", "--lr",
                            "0.001", *small)
    assert code == 0 and validation(out)[-1] > 0.6, out[-2000:]
    # fit.py passes momentum and multi_precision to signum, as to sgd.
    code, out = train_mnist(workdir, "--num-epochs", "1", "--optimizer", "signum", "--lr",
                            "0.001", *small)
    assert code == 0 and validation(out)[-1] > 0.6, out[-2000:]


@pytest.mark.parametrize("flags,named", [
    (["--monitor", "10"], "mx.mon.Monitor is not available"),
    (["--network", "lenet", "--add_stn"], "mx.sym.SpatialTransformer is not available"),
    (["--optimizer", "nadam"], "optimizer 'nadam' is not available"),
])
def test_mxnet_features_kvtrain_lacks_stop_the_script_naming_them(workdir, flags, named):
    code, out = train_mnist(workdir, "--num-epochs", "1", "--num-examples", "1000",
                            "--kv-store", "local", *flags)
    assert code != 0 and named in out, out[-2000:]


# -- MXNet's files: the binary NDArray format and the JSON graph -----------------
TESTDATA = os.path.join(ROOT, "python", "tests", "testdata")


def test_nd_save_writes_mxnets_binary_layout_and_reads_it_back(tmp_path):
    import struct
    path = str(tmp_path / "w.nd")
    w = mx.nd.array([[1, 2, 3], [4, 5, 6]])
    mx.nd.save(path, {"w": w})
    # MXNet's list header, one version-2 dense float32 array on cpu(0), one name.
    want = (struct.pack("<QQQ", 0x112, 0, 1) + struct.pack("<Ii", 0xF993FAC9, 0)
            + struct.pack("<iqq", 2, 2, 3) + struct.pack("<iii", 1, 0, 0)
            + np.arange(1, 7, dtype="<f4").tobytes() + struct.pack("<QQ", 1, 1) + b"w")
    assert open(path, "rb").read() == want
    # Every dtype MXNet has, a list without names, a row-sparse array.
    arrays = [mx.nd.array(np.arange(4), dtype=t) for t in
              ("float32", "float64", "float16", "uint8", "int32", "int8", "int64")]
    sparse = mx.nd.array([[0, 0], [1, 2], [0, 0]]).tostype("row_sparse")
    mx.nd.save(path, arrays + [sparse])
    back = mx.nd.load(path)
    assert isinstance(back, list) and len(back) == 8
    for a, b in zip(arrays, back):
        assert b.dtype == a.dtype and b.asnumpy().tolist() == a.asnumpy().tolist()
    assert back[7].stype == "row_sparse" and back[7].indices.asnumpy().tolist() == [1]
    assert back[7].asnumpy().tolist() == [[0, 0], [1, 2], [0, 0]]
    # The oldest layout (ndim as the magic, uint32 dims) still reads.
    old = (struct.pack("<QQQ", 0x112, 0, 1) + struct.pack("<II", 1, 2)
           + struct.pack("<iii", 1, 0, 0) + np.array([7, 8], "<f4").tobytes()
           + struct.pack("<Q", 0))
    (tmp_path / "old.nd").write_bytes(old)
    assert mx.nd.load(str(tmp_path / "old.nd"))[0].asnumpy().tolist() == [7, 8]
    # A cut file and a foreign one are errors naming the file and the place.
    (tmp_path / "cut.nd").write_bytes(want[:-3])
    with pytest.raises(ValueError,
                       match="cut.nd: name 0 length at byte 96 runs past the end \\(102 bytes"):
        mx.nd.load(str(tmp_path / "cut.nd"))
    (tmp_path / "png.nd").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(16))
    with pytest.raises(ValueError, match="not MXNet's NDArray list magic"):
        mx.nd.load(str(tmp_path / "png.nd"))


def test_an_mxnet_symbol_json_and_params_pair_loads_and_predicts(tmp_path):
    prefix = str(tmp_path / "mlp_bn")
    with open(os.path.join(TESTDATA, "mxnet_mlp_bn-symbol.json")) as f:
        open(prefix + "-symbol.json", "w").write(f.read())
    rng = np.random.RandomState(5)
    p = {"fc1_weight": rng.randn(8, 5), "fc1_bias": rng.randn(8), "bn1_gamma": rng.rand(8) + .5,
         "bn1_beta": rng.randn(8), "fc2_weight": rng.randn(3, 8), "fc2_bias": rng.randn(3)}
    aux = {"bn1_moving_mean": rng.randn(8), "bn1_moving_var": rng.rand(8) + .5}
    arrays = {"arg:" + k: mx.nd.array(v) for k, v in p.items()}
    arrays.update({"aux:" + k: mx.nd.array(v) for k, v in aux.items()})
    mx.nd.save(prefix + "-0007.params", arrays)
    sym, arg_params, aux_params = mx.model.load_checkpoint(prefix, 7)
    assert sorted(aux_params) == ["bn1_moving_mean", "bn1_moving_var"]
    x = rng.randn(6, 5).astype(np.float32)
    mod = mx.mod.Module(sym, context=mx.cpu())
    mod.bind(data_shapes=[("data", (6, 5))], label_shapes=[("softmax_label", (6,))],
             for_training=False)
    mod.set_params(arg_params, aux_params)
    got = mod.predict(mx.io.NDArrayIter(x, np.zeros(6), 6)).asnumpy()
    # The same network in numpy, BatchNorm with its moving statistics.
    h = x @ p["fc1_weight"].T + p["fc1_bias"]
    h = (h - aux["bn1_moving_mean"]) / np.sqrt(aux["bn1_moving_var"] + 1e-3)
    h = np.maximum(h * p["bn1_gamma"] + p["bn1_beta"], 0) @ p["fc2_weight"].T + p["fc2_bias"]
    want = np.exp(h - h.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # What kvtrain saves, MXNet's loader reads: the same graph and arrays back.
    mx.model.save_checkpoint(prefix + "-again", 1, sym, arg_params, aux_params)
    graph = json.loads(open(prefix + "-again-symbol.json").read())
    assert [n["op"] for n in graph["nodes"]].count("null") == 10
    assert graph["heads"] == [[14, 0, 0]] and graph["arg_nodes"][-1] == 13
    assert sorted(mx.nd.load(prefix + "-again-0001.params")) == sorted(arrays)
    sym2, arg2, aux2 = mx.model.load_checkpoint(prefix + "-again", 1)
    assert sym2.tojson() == sym.tojson()
    assert all(np.array_equal(arg2[k].asnumpy(), arg_params[k].asnumpy()) for k in arg2)


def test_fit_calls_the_eval_callbacks_with_the_validation_metrics():
    rng = np.random.RandomState(1)
    x = rng.randn(300, 4).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.float32)
    train = mx.io.NDArrayIter(x[:200], y[:200], batch_size=50)
    val = mx.io.NDArrayIter(x[200:], y[200:], batch_size=50)
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2),
                               name="softmax")
    batches, ends = [], []
    mod = mx.mod.Module(net)
    mod.fit(train, eval_data=val, num_epoch=3, optimizer_params={"learning_rate": 0.5},
            eval_batch_end_callback=lambda p: batches.append((p.epoch, p.nbatch)),
            eval_end_callback=[mx.callback.LogValidationMetricsCallback(),
                               lambda p: ends.append((p.epoch, p.eval_metric.get_name_value()))])
    assert batches == [(e, b) for e in range(3) for b in range(2)]
    assert [e for e, _ in ends] == [0, 1, 2]
    names, last = zip(*ends[-1][1])
    assert names == ("accuracy",)
    assert last[0] == dict(mod.score(val, "acc"))["accuracy"] > 0.8


def test_csv_iter_reads_mxnets_csv_files_and_trains(tmp_path):
    rng = np.random.RandomState(0)
    x = rng.randn(200, 6).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.float32)
    np.savetxt(str(tmp_path / "x.csv"), x, delimiter=",", fmt="%.6f")
    np.savetxt(str(tmp_path / "y.csv"), y, fmt="%d")
    it = mx.io.CSVIter(data_csv=str(tmp_path / "x.csv"), data_shape=(2, 3),
                       label_csv=str(tmp_path / "y.csv"), batch_size=50)
    assert it.provide_data[0].shape == (50, 2, 3)
    first = it.next()
    assert np.allclose(first.data[0].asnumpy().reshape(50, 6), x[:50], atol=1e-6)
    assert np.array_equal(first.label[0].asnumpy(), y[:50])
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(mx.sym.Flatten(mx.sym.var("data")),
                                                     num_hidden=2), name="softmax")
    mod = mx.mod.Module(net)
    it.reset()
    mod.fit(it, num_epoch=20, optimizer="sgd",
            optimizer_params={"learning_rate": 0.5}, initializer=mx.init.Xavier())
    assert dict(mod.score(it, "acc"))["accuracy"] > 0.9
    (tmp_path / "bad.csv").write_text("1,2,3,4,5,6\n1,2,oops,4,5,6\n")
    with pytest.raises(ValueError, match=r"bad.csv line 2 column 3: not a finite number"):
        mx.io.CSVIter(data_csv=str(tmp_path / "bad.csv"), data_shape=(6,), batch_size=1)
    with pytest.raises(NotInKvtrain, match="label_shape"):
        mx.io.CSVIter(data_csv=str(tmp_path / "x.csv"), data_shape=(6,), label_shape=(2,))


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
         + np.broadcast_to(c, (2, 3, 3)) + c ** r + (c - r)).reshape(2, 9)
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


def test_fit_checkpoints_in_mxnets_files_and_module_load_continues(tmp_path):
    x = np.random.RandomState(0).rand(64, 10).astype(np.float32)
    y = (x.sum(1) > 5).astype(np.float32)
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(mx.sym.Variable("data"), num_hidden=2,
                                                     name="fc"), name="softmax")
    mod = mx.mod.Module(net)
    prefix = str(tmp_path / "m")
    mod.fit(mx.io.NDArrayIter(x, y, 16), num_epoch=2, optimizer_params={"learning_rate": 0.1},
            epoch_end_callback=mx.callback.do_checkpoint(prefix, period=2))
    assert sorted(os.listdir(str(tmp_path))) == ["m-0002.params", "m-symbol.json"]
    arg, _ = mod.get_params()
    again = mx.mod.Module.load(prefix, 2)
    again.bind(data_shapes=[("data", (16, 10))], label_shapes=[("softmax_label", (16,))])
    again.init_params()
    arg2, _ = again.get_params()
    assert all(np.array_equal(arg[k].asnumpy(), arg2[k].asnumpy()) for k in arg)


def test_feedforward_creates_fits_scores_predicts_saves_and_loads(tmp_path):
    rng = np.random.RandomState(0)
    x = rng.rand(256, 10).astype(np.float32)
    y = (x.sum(1) > 5).astype(np.float32)
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(mx.sym.Variable("data"), num_hidden=2,
                                                     name="fc"), name="softmax")
    model = mx.model.FeedForward.create(net, X=x, y=y, num_epoch=8, learning_rate=0.5,
                                        numpy_batch_size=32, initializer=mx.init.Xavier())
    assert model.score(mx.io.NDArrayIter(x, y, 32)) > 0.6
    pred = model.predict(x)
    assert pred.shape == (256, 2) and np.allclose(pred.sum(1), 1, atol=1e-5)
    model.save(str(tmp_path / "ff"))
    assert sorted(os.listdir(str(tmp_path))) == ["ff-0008.params", "ff-symbol.json"]
    again = mx.model.FeedForward.load(str(tmp_path / "ff"), 8)
    np.testing.assert_array_equal(again.predict(x), pred)
    with pytest.raises(ValueError, match="num_epoch was not given"):
        mx.model.FeedForward(net).fit(x, y)


@pytest.fixture
def small_workdir(workdir):
    """data/ with the first 1,000 test images only (evaluation stays cheap)."""
    import gzip
    import struct
    for kind, header in (("images-idx3-ubyte", ">IIII"), ("labels-idx1-ubyte", ">II")):
        path = os.path.join(workdir, "data", "t10k-%s.gz" % kind)
        with gzip.open(os.path.join(MNIST, "t10k-%s.gz" % kind)) as f:
            head = list(struct.unpack(header, f.read(struct.calcsize(header))))
            per = 28 * 28 if kind.startswith("images") else 1
            body = f.read(1000 * per)
        head[1] = 1000
        os.remove(path)
        with gzip.open(path, "wb") as f:
            f.write(struct.pack(header, *head) + body)
    return workdir


def test_mxnet_style_resnet_builds_and_trains_on_28x28(small_workdir):
    code, out = train_mnist(small_workdir, "--network", "resnet", "--num-layers", "8",
                            "--num-epochs", "1", "--num-examples", "1920", "--kv-store",
                            "local", "--lr", "0.05")
    assert code == 0, out[-3000:]
    acc = validation(out)
    # Ten classes (0.1 by chance); 30 batches gave 0.39 to 0.58.
    assert len(acc) == 1 and acc[0] > 0.25, out[-2000:]
    code, out = train_mnist(small_workdir, "--network", "resnet", "--num-layers", "8",
                            "--num-epochs", "1", "--num-examples", "640", "--kv-store", "local",
                            "--dtype", "float16")
    assert code != 0 and 'attribute dtype="float16": expected one of float32' in out, out[-2000:]
    # The units' identity, BatchNorm, global pooling and shortcut sums build.
    import importlib
    sys.path.insert(0, SCRIPTS)
    try:
        resnet = importlib.import_module("symbols.resnet")
        net = resnet.get_symbol(num_classes=10, num_layers=20, image_shape="1, 28, 28")
    finally:
        sys.path.remove(SCRIPTS)
    assert len([a for a in net.list_arguments() if a.endswith("_conv1_weight")]) == 9
    assert "bn1_moving_var" in net.list_auxiliary_states()
    assert mx.sym.load_json(net.tojson()).tojson() == net.tojson()


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


def test_mxnet_train_mnist_with_a_power_schedule(workdir):
    code, out = train_mnist(workdir, "--num-epochs", "2", "--num-examples", "2000",
                            "--kv-store", "local", "--lr-step-epochs", "pow2",
                            "--lr-factor", "0.5")
    assert code == 0 and len(validation(out)) == 2, out[-2000:]


def test_get_mnist_reads_the_bundled_data_offline(tmp_path):
    m = mx.test_utils.get_mnist()
    assert m["train_data"].shape == (60000, 1, 28, 28) and m["test_label"].shape == (10000,)
    assert m["train_data"].dtype == np.float32 and 0 <= m["train_data"].min() < 1e-6
    assert m["train_data"].max() == 1.0 and set(np.unique(m["train_label"])) == set(range(10))
    train, val = mx.test_utils.get_mnist_iterator(100, (1, 28, 28))
    batch = next(iter(train))
    assert batch.data[0].shape == (100, 1, 28, 28)
    with pytest.raises(FileNotFoundError, match="kvtrain does not download"):
        mx.test_utils.get_mnist(str(tmp_path))


def test_regression_metrics_in_fit_and_alone():
    rng = np.random.RandomState(3)
    x = rng.rand(512, 4).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.25).astype(np.float32)
    net = mx.sym.LinearRegressionOutput(
        mx.sym.FullyConnected(mx.sym.Variable("data"), num_hidden=1, name="fc"), name="lro")
    mod = mx.mod.Module(net, label_names=["lro_label"])
    train = mx.io.NDArrayIter(x, y, 32, shuffle=True, label_name="lro_label")
    mod.fit(train, eval_metric=["mse", mx.metric.RMSE(), "mae"], optimizer="sgd",
            optimizer_params={"learning_rate": 0.1, "momentum": 0.9}, num_epoch=30)
    scores = dict(mod.score(mx.io.NDArrayIter(x, y, 32, label_name="lro_label"),
                            ["mse", "rmse", "mae"]))
    assert scores["mse"] < 0.01 and scores["rmse"] < 0.1 and scores["mae"] < 0.1, scores
    # Alone: each batch's mean, averaged over batches (MXNet's rule).
    metrics = [mx.metric.create(n) for n in ("mse", "rmse", "mae")]
    batches = [(np.array([1, 2, 3, 4.0]), np.array([1, 4, 3, 0.0])),
               (np.array([0, 0.0]), np.array([1, 1.0]))]
    for label, pred in batches:
        for m in metrics:
            m.update([mx.nd.array(label)], [mx.nd.array(pred)])
    assert [m.get()[0] for m in metrics] == ["mse", "rmse", "mae"]
    np.testing.assert_allclose([m.get()[1] for m in metrics],
                               [(5 + 1) / 2, (np.sqrt(5) + 1) / 2, (1.5 + 1) / 2], rtol=1e-6)


def test_f1_and_perplexity_as_mxnet_computes_them():
    # Two batches of two-class scores: F1 of the argmax, class 1 positive.
    batches = [(np.array([1, 0, 1, 0.0]), np.array([[0.2, 0.8], [0.4, 0.6], [0.9, 0.1], [0.7, 0.3]])),
               (np.array([1, 1.0]), np.array([[0.1, 0.9], [0.3, 0.7]]))]
    macro, micro = mx.metric.create("f1"), mx.metric.F1(average="micro")
    ppl = mx.metric.Perplexity(ignore_label=None)
    for label, pred in batches:
        for m in (macro, micro, ppl):
            m.update([mx.nd.array(label)], [mx.nd.array(pred)])
    assert macro.get() == ("f1", pytest.approx((0.5 + 1.0) / 2))
    assert micro.get() == ("f1", pytest.approx(0.75))  # tp 3, fp 1, fn 1
    nll = -np.mean(np.log([0.8, 0.4, 0.1, 0.7, 0.9, 0.7]))
    assert ppl.get() == ("perplexity", pytest.approx(np.exp(nll), rel=1e-6))
    # MXNet's ignore_label leaves those rows out.
    some = mx.metric.Perplexity(ignore_label=0)
    some.update([mx.nd.array(batches[0][0])], [mx.nd.array(batches[0][1])])
    assert some.get()[1] == pytest.approx(np.exp(-np.mean(np.log([0.8, 0.1]))), rel=1e-6)
    with pytest.raises(ValueError, match="metric f1 is for two classes"):
        macro.update([mx.nd.array([0, 1, 2.0])], [mx.nd.array(np.eye(3))])


def test_orthogonal_initializer_gives_orthonormal_rows_times_its_scale():
    net = mx.sym.FullyConnected(mx.sym.FullyConnected(mx.sym.Variable("data"), num_hidden=4,
                                                      name="fc1"), num_hidden=12, name="fc2")
    mod = mx.mod.Module(mx.sym.SoftmaxOutput(net, name="softmax"))
    mod.bind(data_shapes=[("data", (8, 10))], label_shapes=[("softmax_label", (8,))])
    mod.init_params(mx.init.Orthogonal(scale=2.0, rand_type="normal"))
    arg, _ = mod.get_params()
    w1, w2 = arg["fc1_weight"].asnumpy(), arg["fc2_weight"].asnumpy()
    # (4, 10): orthonormal rows; (12, 4): orthonormal columns; both times 2.
    np.testing.assert_allclose(w1 @ w1.T, 4 * np.eye(4), atol=1e-4)
    np.testing.assert_allclose(w2.T @ w2, 4 * np.eye(4), atol=1e-4)
    assert np.all(arg["fc1_bias"].asnumpy() == 0)
    with pytest.raises(ValueError, match="rand_type"):
        mx.init.Orthogonal(rand_type="poisson")


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
