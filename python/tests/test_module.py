"""kvtrain.mod.Module against the C++ trainer (examples/train_mnist): the same
parameters bit for bit for the same seed and data, checkpoints each can
resume from the other's, callbacks, predict, score, Ctrl-C."""

import gzip
import os
import subprocess

import numpy as np
import pytest

import kvtrain as kt
from conftest import MNIST_DIR, PY, TRAIN_MNIST_CC

N = 1000       # training examples
SEED = 3
BATCH = 100


def mnist_numpy(n):
    """The first n training images as the C++ iterator scales them, and labels."""
    with gzip.open(os.path.join(MNIST_DIR, "train-images-idx3-ubyte.gz")) as f:
        raw = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)[:n]
    with gzip.open(os.path.join(MNIST_DIR, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    return raw.astype(np.float32) * np.float32(1.0 / 255.0), labels


def mlp():
    net = kt.sym.Variable("data")
    for i, h in enumerate((128, 64, 10)):
        net = kt.sym.FullyConnected(net, num_hidden=h, name="fc%d" % (i + 1))
        if h != 10:
            net = kt.sym.Activation(net, act_type="relu", name="relu%d" % (i + 1))
    return kt.sym.SoftmaxOutput(net, name="softmax")


def optimizer_params():
    # examples/train_mnist's defaults: steps after epochs 6 and 8 of 10 batches.
    return {"learning_rate": 0.05, "momentum": 0.9, "wd": 0.0001,
            "lr_scheduler": kt.lr_scheduler.MultiFactorScheduler([60, 80], 0.2)}


def train_iter():
    x, y = mnist_numpy(N)
    return kt.io.NDArrayIter(x, y, batch_size=BATCH, shuffle=True, seed=SEED)


def cc_train(prefix, *extra):
    r = subprocess.run([TRAIN_MNIST_CC, "--num-examples", str(N), "--seed", str(SEED),
                        "--model-prefix", prefix, "--disp-batches", "0"] + list(extra),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stderr + r.stdout


@pytest.fixture(scope="module")
def cc_run(tmp_path_factory):
    """The C++ trainer's checkpoints of epochs 1 and 2."""
    prefix = str(tmp_path_factory.mktemp("cc") / "mlp")
    cc_train(prefix, "--num-epochs", "2")
    return prefix


def assert_same_params(args, path):
    want, _ = kt.model.load_params(path)
    assert sorted(args) == sorted(want)
    for name in want:
        assert np.array_equal(args[name], want[name]), name


def test_fit_matches_the_cpp_trainer_bit_for_bit(cc_run):
    mod = kt.mod.Module(mlp())
    mod.fit(train_iter(), kvstore="local", optimizer="sgd", optimizer_params=optimizer_params(),
            initializer=kt.init.Xavier(seed=SEED), num_epoch=2)
    args, aux = mod.get_params()
    assert aux == {}
    assert_same_params(args, cc_run + "-0002.params")


def test_python_resumes_a_cpp_checkpoint_exactly(cc_run):
    mod = kt.mod.Module.load(cc_run, 1, load_optimizer_states=True)
    mod.fit(train_iter(), kvstore="local", optimizer="sgd", optimizer_params=optimizer_params(),
            begin_epoch=1, num_epoch=2)
    assert_same_params(mod.get_params()[0], cc_run + "-0002.params")


def test_cpp_resumes_a_python_checkpoint_exactly(cc_run, tmp_path):
    prefix = str(tmp_path / "py")
    mod = kt.mod.Module(mlp())
    mod.fit(train_iter(), optimizer_params=optimizer_params(),
            initializer=kt.init.Xavier(seed=SEED), num_epoch=1,
            epoch_end_callback=kt.callback.do_checkpoint(prefix))
    for f in ("-symbol.txt", "-0001.params", "-0001.states"):
        assert os.path.exists(prefix + f), f
    cc_train(prefix, "--load-epoch", "1", "--num-epochs", "2")
    assert_same_params(kt.model.load_params(prefix + "-0002.params")[0],
                       cc_run + "-0002.params")
    sym, args, aux = kt.model.load_checkpoint(prefix, 2)
    assert sym.list_arguments() == mlp().list_arguments()


def test_the_workers_optimizer_and_a_checkpoint_period(cc_run, tmp_path):
    # update_on_kvstore=False: the module's own optimizer applies the
    # store's summed gradients, writing what the store's optimizer writes;
    # do_checkpoint's period goes to the C++ trainer, which saves the states
    # of the optimizer that ran.
    prefix = str(tmp_path / "py")
    mod = kt.mod.Module(mlp())
    mod.fit(train_iter(), optimizer_params=optimizer_params(),
            initializer=kt.init.Xavier(seed=SEED), num_epoch=2, update_on_kvstore=False,
            epoch_end_callback=kt.callback.do_checkpoint(prefix, period=2))
    assert not os.path.exists(prefix + "-0001.params")
    assert os.path.exists(prefix + "-0002.states")
    assert_same_params(kt.model.load_params(prefix + "-0002.params")[0],
                       cc_run + "-0002.params")
    # Resumed from those states, epoch 3 is what an uninterrupted run's is.
    again = kt.mod.Module.load(prefix, 2, load_optimizer_states=True)
    again.fit(train_iter(), optimizer_params=optimizer_params(), begin_epoch=2, num_epoch=3,
              update_on_kvstore=False, epoch_end_callback=kt.callback.do_checkpoint(prefix))
    whole = kt.mod.Module(mlp())
    whole.fit(train_iter(), optimizer_params=optimizer_params(),
              initializer=kt.init.Xavier(seed=SEED), num_epoch=3, update_on_kvstore=False)
    assert_same_params(whole.get_params()[0], prefix + "-0003.params")


class _Batch(object):
    def __init__(self, data, label):
        self.data, self.label = [data], [label]


def test_step_by_step_equals_fit_bit_for_bit():
    """forward/backward/update over the same batches in the same order train
    the same weights as fit, and the outputs and metric follow the steps."""
    x, y = mnist_numpy(N)
    fitted = kt.mod.Module(mlp())
    fitted.fit(kt.io.NDArrayIter(x, y, batch_size=BATCH), kvstore="local", optimizer="sgd",
               optimizer_params=optimizer_params(), initializer=kt.init.Xavier(seed=SEED),
               num_epoch=2)
    mod = kt.mod.Module(mlp())
    mod.bind([("data", (BATCH, 784))], [("softmax_label", (BATCH,))])
    mod.init_params(kt.init.Xavier(seed=SEED))
    mod.init_optimizer(kvstore="local", optimizer="sgd", optimizer_params=optimizer_params())
    metric = kt._lib.Metric("accuracy")
    for _ in range(2):
        metric.reset()
        for i in range(0, N, BATCH):
            batch = _Batch(x[i:i + BATCH], y[i:i + BATCH])
            mod.forward(batch, is_train=True)
            out = mod.get_outputs()[0]
            assert out.shape == (BATCH, 10)
            assert np.allclose(out.sum(axis=1), 1, atol=1e-5)  # softmax rows
            metric.update(y[i:i + BATCH].astype(np.float32), out)
            mod.backward()
            mod.update()
    assert metric.get() > 0.6, metric.get()
    got, _ = mod.get_params()
    want, _ = fitted.get_params()
    for name in want:
        assert np.array_equal(got[name], want[name]), name
    # Inference: no label needed, and the weights stay.
    mod.forward(_Batch(x[:BATCH], None), is_train=False)
    assert mod.get_outputs()[0].shape == (BATCH, 10)
    assert all(np.array_equal(a, b) for a, b in zip(mod.get_params()[0].values(), got.values()))


def test_step_by_step_out_of_order_is_refused():
    x, y = mnist_numpy(BATCH)
    mod = kt.mod.Module(mlp())
    with pytest.raises(RuntimeError, match="forward before bind and init_params"):
        mod.forward(_Batch(x, y))
    mod.bind([("data", (BATCH, 784))], [("softmax_label", (BATCH,))])
    mod.init_params()
    with pytest.raises(Exception, match="backward without a forward"):
        mod.backward()
    with pytest.raises(RuntimeError, match="update before init_optimizer"):
        mod.update()
    mod.forward(_Batch(x, y), is_train=False)
    with pytest.raises(Exception, match="is_train=False"):
        mod.backward()
    mod.init_optimizer()
    with pytest.raises(Exception, match="update without a backward"):
        mod.update()
    with pytest.raises(Exception, match="batch of 50 rows; the module was bound for 100"):
        mod.forward(_Batch(x[:50], y[:50]), is_train=True)
    mod.forward(_Batch(x, y), is_train=True)
    mod.backward()
    mod.update()


def test_callbacks_score_predict(tmp_path):
    seen, epochs = [], []
    mod = kt.mod.Module(mlp(), context=[kt.cpu(0), kt.cpu(1)])
    test = kt.io.MNISTIter(MNIST_DIR, train=False, batch_size=BATCH)
    mod.fit(train_iter(), eval_data=test, eval_metric=["acc", "ce"],
            optimizer_params={"learning_rate": 0.1}, initializer=kt.init.Xavier(),
            num_epoch=2,
            batch_end_callback=lambda p: seen.append((p.epoch, p.nbatch,
                                                      dict(p.eval_metric.get_name_value()))),
            epoch_end_callback=lambda e, s, a, x: epochs.append((e, sorted(a))))
    assert [(e, n) for e, n, _ in seen] == [(e, n) for e in (0, 1) for n in range(10)]
    assert set(seen[-1][2]) == {"accuracy", "cross-entropy"}
    assert [e for e, _ in epochs] == [0, 1]
    assert epochs[0][1] == sorted(n for n in mlp().list_arguments()
                                  if n not in ("data", "softmax_label"))
    score = dict(mod.score(test, ["acc"]))
    assert 0.5 < score["accuracy"] <= 1.0
    probs = mod.predict(test)
    assert probs.shape == (10000, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-4)
    labels = np.concatenate([b.label[0] for b in kt.io.MNISTIter(MNIST_DIR, train=False,
                                                                 batch_size=BATCH)])
    assert abs((probs.argmax(1) == labels).mean() - score["accuracy"]) < 1e-9
    # Save, then load into a new module: the same predictions.
    mod.save_checkpoint(str(tmp_path / "m"), 2)
    again = kt.mod.Module.load(str(tmp_path / "m"), 2, context=[kt.cpu(0), kt.cpu(1)])
    again.bind([("data", (BATCH, 784))], [("softmax_label", (BATCH,))])
    again.init_params()
    # (Two CPU contexts run their GEMMs concurrently: the last bits vary.)
    np.testing.assert_allclose(again.predict(test), probs, rtol=1e-5, atol=1e-7)


def test_a_callbacks_exception_ends_fit_as_it_was():
    mod = kt.mod.Module(mlp())

    def boom(param):
        if param.nbatch == 3:
            raise ZeroDivisionError("from the callback")
    with pytest.raises(ZeroDivisionError, match="from the callback"):
        mod.fit(train_iter(), num_epoch=1, batch_end_callback=boom)


def test_bad_module_arguments():
    with pytest.raises(TypeError, match="kvtrain.sym.Symbol"):
        kt.mod.Module("net")
    with pytest.raises(ValueError, match="num_epoch is required"):
        kt.mod.Module(mlp()).fit(train_iter())
    mod = kt.mod.Module(mlp())
    with pytest.raises(RuntimeError, match="before bind"):
        mod.get_params()
    mod.bind([("data", (BATCH, 784))])
    with pytest.raises(kt.KVTrainError, match="fc1_weight"):
        mod.init_params(arg_params={"fc1_weight": np.zeros((3, 3), np.float32)})
    if kt.num_gpus() == 0:
        with pytest.raises(kt.KVTrainError):
            kt.mod.Module(mlp(), context=kt.gpu(0))


def test_ctrl_c_during_fit_raises_keyboard_interrupt(script):
    path = script("""
        import os, signal, threading, time
        import numpy as np
        import kvtrain as kt
        x = np.random.rand(20000, 784).astype(np.float32)
        it = kt.io.NDArrayIter(x, np.zeros(20000), batch_size=100)
        net = kt.sym.SoftmaxOutput(kt.sym.FullyConnected(kt.sym.Variable('data'),
                                   num_hidden=10, name='fc'), name='softmax')
        threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        t = time.time()
        try:
            kt.mod.Module(net).fit(it, num_epoch=1000)
        except KeyboardInterrupt:
            print('interrupted after %.1f s' % (time.time() - t))
            sys.exit(0)
        print('fit ended without the interrupt')
        sys.exit(1)
    """)
    r = subprocess.run([PY, path], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    seconds = float(r.stdout.split("interrupted after ")[1].split()[0])
    assert seconds < 10, r.stdout


def test_variable_multipliers_reach_the_optimizer():
    # lr_mult 0 freezes fc1_weight; fc2_weight learns at twice the rate.
    w1 = kt.sym.Variable("fc1_weight", lr_mult=0)
    net = kt.sym.SoftmaxOutput(kt.sym.FullyConnected(
        kt.sym.Activation(kt.sym.FullyConnected(kt.sym.Variable("data"), weight=w1,
                                                num_hidden=8, name="fc1"), act_type="relu"),
        weight=kt.sym.Variable("fc2_weight", lr_mult=2), num_hidden=3, name="fc2"),
        name="softmax")
    assert net.attr_dict()["fc1_weight"] == {"__lr_mult__": "0.0"}
    rng = np.random.RandomState(1)
    x = rng.randn(64, 5).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.float32)
    mod = kt.mod.Module(net)
    mod.bind([("data", (16, 5))], [("softmax_label", (16,))])
    mod.init_params(kt.init.Xavier())
    before = mod.get_params()[0]["fc1_weight"].copy()
    mod.fit(kt.io.NDArrayIter(x, y, batch_size=16), num_epoch=1,
            optimizer_params={"learning_rate": 0.1})
    assert np.array_equal(mod.get_params()[0]["fc1_weight"], before)
    assert mod._optimizer.params["lr_mult"] == {"fc1_weight": 0.0, "fc2_weight": 2.0}
