"""kvtrain.io: NDArrayIter over numpy arrays and MNISTIter over IDX files."""

import numpy as np
import pytest

import kvtrain as kt
from conftest import MNIST_DIR


def batches(it):
    return [(b.data[0].copy(), b.label[0].copy(), b.pad) for b in it]


def test_batches_pad_and_discard():
    x = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
    y = np.arange(10)
    it = kt.io.NDArrayIter(x, y, batch_size=4)
    assert it.provide_data == [("data", (4, 3))]
    assert it.provide_label == [("softmax_label", (4,))]
    got = batches(it)
    assert [b[2] for b in got] == [0, 0, 2]
    np.testing.assert_array_equal(got[0][0], x[:4])
    np.testing.assert_array_equal(got[2][1], [8, 9, 0, 1])  # padded from the start
    assert got[1][1].dtype == np.float32
    it.reset()
    assert len(batches(it)) == 3  # the next epoch
    d = kt.io.NDArrayIter(x, y, batch_size=4, last_batch_handle="discard")
    assert len(batches(d)) == 2


def test_parts_cover_the_data_once_in_the_same_shuffled_order():
    x = np.arange(24, dtype=np.float32).reshape(24, 1)
    y = np.arange(24)
    whole = batches(kt.io.NDArrayIter(x, y, batch_size=6, shuffle=True, seed=7))
    parts = [batches(kt.io.NDArrayIter(x, y, batch_size=3, shuffle=True, seed=7,
                                       num_parts=2, part_index=i)) for i in (0, 1)]
    for t, w in enumerate(whole):
        joined = np.concatenate([parts[0][t][1], parts[1][t][1]])
        np.testing.assert_array_equal(np.sort(joined), np.sort(w[1]))
    seen = np.concatenate([b[1] for p in parts for b in p])
    assert sorted(seen.tolist()) == list(range(24))
    other = batches(kt.io.NDArrayIter(x, y, batch_size=6, shuffle=True, seed=8))
    assert any((a[1] != b[1]).any() for a, b in zip(whole, other))


def test_other_dtypes_are_converted_once_here():
    x = np.arange(8, dtype=np.float64).reshape(4, 2)
    it = kt.io.NDArrayIter(x, np.zeros(4, np.int64), batch_size=2)
    b = next(iter(it))
    assert b.data[0].dtype == np.float32
    np.testing.assert_array_equal(b.data[0], x[:2])


def test_bad_arguments_are_named():
    x = np.zeros((4, 2), np.float32)
    with pytest.raises(ValueError, match=r"label of shape \(4,\)"):
        kt.io.NDArrayIter(x, np.zeros(3), batch_size=2)
    with pytest.raises(ValueError, match=r"part_index"):
        kt.io.NDArrayIter(x, np.zeros(4), batch_size=2, num_parts=2, part_index=2)
    with pytest.raises(TypeError, match=r"labels must be numbers"):
        kt.io.NDArrayIter(x, np.array(["a", "b", "c", "d"]), batch_size=2)
    with pytest.raises(ValueError, match=r"last_batch_handle"):
        kt.io.NDArrayIter(x, np.zeros(4), batch_size=2, last_batch_handle="wrap")
    with pytest.raises(kt.KVTrainError, match=r"batch"):
        kt.io.NDArrayIter(x, np.zeros(4), batch_size=0)
    with pytest.raises(ValueError, match=r"not a directory"):
        kt.io.MNISTIter("/nonexistent/mnist")


def test_mnist_iter_shapes():
    flat = kt.io.MNISTIter(MNIST_DIR, train=False, batch_size=50)
    assert flat.provide_data == [("data", (50, 784))]
    assert flat.num_batches == 200
    img = kt.io.MNISTIter(MNIST_DIR, train=False, batch_size=50, flat=False)
    b = next(iter(img))
    assert b.data[0].shape == (50, 1, 28, 28)
    assert 0.0 <= b.data[0].min() and b.data[0].max() <= 1.0
    assert set(np.unique(b.label[0])) <= set(range(10))
