"""kvtrain.kv in one process: every call of the local store types, the
optimizer, the errors and their messages."""

import numpy as np
import pytest

import kvtrain as kt


@pytest.fixture(params=["local", "device"])
def kv(request):
    return kt.kv.create(request.param)


def test_types_and_identity(kv):
    assert kt.kv.TYPES == ("local", "device", "dist_sync", "dist_device_sync", "dist_async",
                           "dist_ssp", "dist_allreduce")
    assert kv.rank == 0 and kv.num_workers == 1
    assert kv.type in ("local", "device")
    kv.barrier()  # nothing to wait for


def test_init_push_pull_int_and_str_keys(kv):
    shape = (2, 3)
    kv.init(3, np.ones(shape, np.float32))
    kv.init("fc1_weight", np.full(shape, 2, np.float32))
    out = np.zeros(shape, np.float32)
    kv.pull(3, out=out)
    np.testing.assert_array_equal(out, np.ones(shape))
    kv.pull("fc1_weight", out=out)
    np.testing.assert_array_equal(out, np.full(shape, 2))
    # Without an optimizer the stored value becomes the pushed sum.
    kv.push(3, [np.full(shape, 4, np.float32), np.full(shape, 5, np.float32)])
    outs = [np.zeros(shape, np.float32) for _ in range(3)]
    kv.pull(3, out=outs)
    for o in outs:
        np.testing.assert_array_equal(o, np.full(shape, 9))


def test_lists_of_keys(kv):
    keys = [5, 7, "b"]
    kv.init(keys, [np.full((4,), k, np.float32) for k in (5, 7, 1)])
    outs = [np.zeros((4,), np.float32) for _ in keys]
    kv.pull(keys, out=outs)
    assert [o[0] for o in outs] == [5, 7, 1]
    kv.push(keys, [[np.ones((4,), np.float32)] * 2, np.full((4,), 3, np.float32),
                   np.full((4,), 6, np.float32)], priority=-1)
    kv.pull(keys, out=outs, priority=2)
    assert [o[0] for o in outs] == [2, 3, 6]


def test_pushpull_in_place_and_into_out(kv):
    kv.init(1, np.zeros((3,), np.float32))
    g = np.array([1, 2, 3], np.float32)
    kv.pushpull(1, g)  # out=None: the result lands in the pushed array
    np.testing.assert_array_equal(g, [1, 2, 3])
    out = np.zeros((3,), np.float32)
    kv.pushpull(1, [np.ones((3,), np.float32), np.ones((3,), np.float32)], out=out)
    np.testing.assert_array_equal(out, [2, 2, 2])


def test_sgd_optimizer_applies_on_push(kv):
    kv.set_optimizer(kt.optimizer.create("sgd", learning_rate=0.5, rescale_grad=1.0))
    kv.init("w", np.full((2,), 10, np.float32))
    kv.push("w", np.full((2,), 2, np.float32))
    out = np.zeros((2,), np.float32)
    kv.pull("w", out=out)
    np.testing.assert_allclose(out, [9, 9])  # 10 - 0.5 * 2


def test_rmsprop_applies_on_push(kv):
    kv.set_optimizer(kt.optimizer.RMSProp(learning_rate=0.1, gamma1=0.5, epsilon=1e-6))
    kv.init("w", np.full((2,), 1, np.float32))
    for _ in range(2):
        kv.push("w", np.full((2,), 2, np.float32))
    out = np.zeros((2,), np.float32)
    kv.pull("w", out=out)
    # n = 0.5 * 4 = 2, then 0.5 * 4 + 0.5 * 2 = 3; w -= 0.1 * 2 / sqrt(n + eps).
    want = 1 - 0.2 / np.sqrt(2 + 1e-6) - 0.2 / np.sqrt(3 + 1e-6)
    np.testing.assert_allclose(out, [want, want], rtol=1e-6)


def test_optimizer_states_save_and_load(kv, tmp_path):
    kv.set_optimizer(kt.optimizer.create("sgd", learning_rate=0.1, momentum=0.9,
                                         rescale_grad=1.0))
    kv.init(0, np.zeros((3,), np.float32))
    kv.push(0, np.ones((3,), np.float32))
    path = str(tmp_path / "states")
    kv.save_optimizer_states(path)
    out_a = np.zeros((3,), np.float32)
    kv.push(0, np.ones((3,), np.float32))
    kv.pull(0, out=out_a)
    # A second store with the saved momentum continues identically.
    kv2 = kt.kv.create(kv.type)
    kv2.set_optimizer(kt.optimizer.create("sgd", learning_rate=0.1, momentum=0.9,
                                          rescale_grad=1.0))
    kv2.init(0, np.full((3,), -0.1, np.float32))
    kv2.load_optimizer_states(path)
    kv2.push(0, np.ones((3,), np.float32))
    out_b = np.zeros((3,), np.float32)
    kv2.pull(0, out=out_b)
    np.testing.assert_array_equal(out_a, out_b)


def test_arrays_of_the_wrong_kind_name_the_key(kv):
    kv.init("w", np.zeros((2, 2), np.float32))
    with pytest.raises(TypeError, match=r"key w: expected a float32 array, got float64"):
        kv.push("w", np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"key w: expected a C-contiguous array"):
        kv.push("w", np.zeros((2, 4), np.float32)[:, ::2])
    ro = np.zeros((2, 2), np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match=r"key w: the array is read-only"):
        kv.pull("w", out=ro)
    with pytest.raises(TypeError, match=r"key 'w': expected a numpy array, got list"):
        kv.push("w", [[1.0, 2.0]])


def test_store_errors_become_exceptions(kv):
    kv.init("w", np.zeros((2, 2), np.float32))
    with pytest.raises(kt.KVTrainError, match=r"\bw\b"):
        kv.push("w", np.zeros((3,), np.float32))  # another shape
    with pytest.raises(kt.KVTrainError, match=r"never initialised|not initialized|unknown|init"):
        kv.pull("missing", out=np.zeros((2,), np.float32))
    with pytest.raises(kt.KVTrainError):
        kv.init("w", np.zeros((2, 2), np.float32))  # twice
    with pytest.raises(ValueError, match=r"out= is required"):
        kv.pull("w")
    with pytest.raises(TypeError, match=r"a key must be an int or a str"):
        kv.push(1.5, np.zeros((2,), np.float32))
    with pytest.raises(ValueError, match=r"2 keys need a list of 2 values"):
        kv.push(["w", "v"], np.zeros((2,), np.float32))


def test_unknown_type_lists_the_valid_ones():
    with pytest.raises(ValueError) as e:
        kt.kv.create("dist_sink")
    assert "dist_sink" in str(e.value) and "dist_sync" in str(e.value)
    assert isinstance(e.value, kt.KVTrainError)


def test_optimizer_specs_are_checked():
    with pytest.raises(ValueError, match=r"momentum"):
        kt.optimizer.create("sgd", momentum=1.5)
    with pytest.raises(ValueError, match=r'"lerning_rate" is unknown'):
        kt.optimizer.create("sgd", lerning_rate=0.1)
    with pytest.raises(ValueError, match=r"expected sgd, nag, adam, adagrad, ftrl, rmsprop, signum, adamax or adadelta"):
        kt.optimizer.create("nadam")
    with pytest.raises(ValueError, match=r"gamma1 1\.5 must be in \[0, 1\)"):
        kt.optimizer.create("rmsprop", gamma1=1.5)
    with pytest.raises(ValueError, match=r"steps .* must increase"):
        kt.lr_scheduler.MultiFactorScheduler([5, 3], 0.1)
    opt = kt.optimizer.create("adam", learning_rate=0.01, beta1=0.8,
                              lr_scheduler=kt.lr_scheduler.FactorScheduler(10, 0.5))
    assert isinstance(opt.spec, bytes) and opt.spec
    with pytest.raises(TypeError, match=r"kvtrain.optimizer.Optimizer"):
        kt.kv.create("local").set_optimizer("sgd")


def test_gradient_compression_needs_a_dist_store():
    kv = kt.kv.create("local")
    with pytest.raises(kt.KVTrainError, match="the 'local' store sends nothing"):
        kv.set_gradient_compression({"type": "fp16"})
    with pytest.raises(ValueError, match="unknown parameter.*'thresold'"):
        kv.set_gradient_compression({"type": "2bit", "thresold": 1})
    with pytest.raises(ValueError, match="unknown type '3bit'"):
        kv.set_gradient_compression({"type": "3bit"})
    with pytest.raises(ValueError, match="threshold -1"):
        kv.set_gradient_compression({"type": "2bit", "threshold": -1})
    with pytest.raises(ValueError, match="unknown pull 'bf16'"):
        kv.set_gradient_compression({"type": "2bit", "pull": "bf16"})
    with pytest.raises(ValueError, match="pull fp16 needs a type"):
        kv.set_gradient_compression({"type": "none", "pull": "fp16"})
    assert kv.gradient_compression == {"type": "none"}
    # dist_allreduce alone (no launcher: a group of one) pulls no weights.
    ar = kt.kv.create("dist_allreduce")
    with pytest.raises(ValueError, match="pull fp16 does not apply to dist_allreduce"):
        ar.set_gradient_compression({"type": "2bit", "threshold": 1, "pull": "fp16"})
    ar.set_gradient_compression({"type": "2bit", "threshold": 1, "min_bytes": 64})
    assert ar.gradient_compression == {"type": "2bit", "threshold": 1.0, "min_bytes": 64}


def test_async_options_belong_to_asynchronous_stores():
    kv = kt.kv.create("local")
    with pytest.raises(kt.KVTrainError, match="for asynchronous stores"):
        kv.set_async_options(staleness=1)
    with pytest.raises(ValueError, match="staleness must be a number of steps"):
        kv.set_async_options(staleness=-3)
    with pytest.raises(ValueError, match="lr must be 'constant' or 'staleness'"):
        kv.set_async_options(lr="fast")
    with pytest.raises(kt.KVTrainError, match="has no staleness"):
        kv.staleness_report()
    assert kv.async_options == {"staleness": -1, "staleness_lr": False}


def test_2bit_threshold_auto():
    ar = kt.kv.create("dist_allreduce")
    ar.set_gradient_compression({"type": "2bit", "threshold": "auto"})
    assert ar.gradient_compression == {"type": "2bit", "threshold": "auto"}
    with pytest.raises(ValueError, match="threshold auto is 2bit's"):
        kt.kv.create("dist_allreduce").set_gradient_compression({"type": "1bit",
                                                                 "threshold": "auto"})
