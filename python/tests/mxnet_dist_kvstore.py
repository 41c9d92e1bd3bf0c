"""A closed-form distributed store check written the way MXNet's nightly
tests are, against `import mxnet as mx` (kvtrain's MXNet face). Every worker
pushes values whose sum it can compute, pulls, and asserts the exact
result. Run under tracker/launch.py with python/compat on PYTHONPATH:

    launch.py -n 2 -s 2 python3 mxnet_dist_kvstore.py --part dense
    launch.py -n 2 -s 2 python3 mxnet_dist_kvstore.py --part 2bit

Parts: dense (float32 and float16 keys, small and split over servers, the
`test` optimizer, init), sparse (row-sparse keys in both dtypes, random row
subsets, all-zero pushes), 2bit (gradient compression's thresholds and
residuals).
"""

import argparse

import numpy as np

import mxnet as mx
from mxnet.test_utils import assert_almost_equal

SMALL = (2, 3)
BIG = (1200, 1200)  # several MB: cut over both servers
RATE = 2  # the test optimizer's rescale_grad

kv = mx.kv.create("dist_sync")
rank, workers = kv.rank, kv.num_workers
# What every worker's pushes of (rank + 1) add per round, times the rate.
ROUND = RATE * workers * (workers + 1) // 2


def equal(got, want, what):
    got = got.asnumpy() if hasattr(got, "asnumpy") else np.asarray(got)
    want = want.asnumpy() if hasattr(want, "asnumpy") else np.asarray(want)
    if got.shape != want.shape and np.ndim(want) != 0:
        raise AssertionError("%s: shape %s, expected %s" % (what, got.shape, want.shape))
    bad = np.argwhere(got != want)
    if bad.size:
        i = tuple(bad[0])
        raise AssertionError("worker %d: %s: %d values differ, first at %s: %r, expected %r"
                             % (rank, what, len(bad), i, got[i],
                                np.broadcast_to(want, got.shape)[i]))


def check_dense(repeat):
    keys = {("3", SMALL, "float32"), ("99", BIG, "float32"),
            ("4", SMALL, "float16"), ("100", BIG, "float16")}
    for key, shape, dtype in sorted(keys):
        kv.init(key, mx.nd.ones(shape, dtype=dtype))
    kv.set_optimizer(mx.optimizer.create("test", rescale_grad=RATE, multi_precision=True))
    for key, shape, dtype in sorted(keys):
        for i in range(repeat):
            kv.push(key, mx.nd.ones(shape, dtype=dtype) * (rank + 1))
            out = mx.nd.zeros(shape, dtype=dtype)
            kv.pull(key, out=out)
            assert out.dtype == np.dtype(dtype).type, out.dtype
            equal(out, 1 + ROUND * (i + 1), "key %s (%s) round %d" % (key, dtype, i))
    # A key per value of i, each starting from i: rank 0's init wins and
    # every worker pulls it, in both dtypes and both sizes.
    for shape, base in ((SMALL, 200), (BIG, 300)):
        for i in range(6):
            dtype = "float32" if i < 3 else "float16"
            key = str(base + i)
            kv.init(key, mx.nd.ones(shape, dtype=dtype) * i)
            out = mx.nd.zeros(shape, dtype=dtype)
            kv.pull(key, out=out)
            equal(out, i, "init of key %s" % key)
    # Several keys in one call, several values per key (summed first).
    kv.init(["50", "51"], [mx.nd.zeros(SMALL), mx.nd.zeros(SMALL)])
    kv.push(["50", "51"], [[mx.nd.ones(SMALL), mx.nd.ones(SMALL) * 2], mx.nd.ones(SMALL)])
    a, b = mx.nd.zeros(SMALL), mx.nd.zeros(SMALL)
    kv.pull(["50", "51"], out=[a, b])
    equal(a, RATE * 3 * workers, "key 50 (two values per worker)")
    equal(b, RATE * workers, "key 51")


def check_sparse(repeat):
    kv.set_optimizer(mx.optimizer.create("test", rescale_grad=RATE))
    for dtype, small, zero_small, big in (("float32", "9", "11", "97"),
                                          ("float16", "10", "12", "98")):
        kv.init(small, mx.nd.ones(SMALL, dtype=dtype).tostype("row_sparse"))
        kv.init(zero_small, mx.nd.ones(SMALL, dtype=dtype).tostype("row_sparse"))
        kv.init(big, mx.nd.ones(BIG, dtype=dtype).tostype("row_sparse"))
        # Each worker updates the row rank % rows; pulls read random rows.
        grad = mx.nd.zeros(SMALL, dtype=dtype)
        grad[rank % SMALL[0]] = rank + 1
        rng = np.random.RandomState(rank)
        for i in range(repeat):
            kv.push(small, grad.tostype("row_sparse"))
            ids = rng.randint(SMALL[0], size=SMALL[0])
            out = mx.nd.zeros(SMALL, stype="row_sparse", dtype=dtype)
            kv.row_sparse_pull(small, out=out, row_ids=mx.nd.array(ids).astype(dtype))
            want = np.zeros(SMALL, dtype)
            for r in np.unique(ids):
                want[r] = 1 + sum((w + 1) * RATE * (i + 1) for w in range(workers)
                                  if w % SMALL[0] == r)
            equal(out, want, "row-sparse key %s (%s) round %d" % (small, dtype, i))
            # An all-zero push changes nothing; an empty pull holds nothing.
            kv.push(zero_small, mx.nd.sparse.zeros("row_sparse", SMALL, dtype=dtype))
            every = mx.nd.sparse.zeros("row_sparse", SMALL, dtype=dtype)
            kv.row_sparse_pull(zero_small, out=every, row_ids=mx.nd.arange(0, SMALL[0]))
            equal(every, 1, "all-zero pushes to key %s" % zero_small)
            kv.row_sparse_pull(zero_small, out=every, row_ids=mx.nd.array([]))
            equal(every, 0, "an empty row_sparse_pull of key %s" % zero_small)
        # The big table: worker w updates every (2w+2)-th of a random 30%
        # of the rows (the same rows on every worker: the same seed).
        picked = np.argwhere(np.random.RandomState(123).rand(BIG[0]) < 0.3).ravel()
        rows_of = [picked[::2 * (w + 1)] for w in range(workers)]
        grad = np.zeros(BIG, dtype)
        grad[rows_of[rank]] = rank + 1
        grad = mx.nd.array(grad, dtype=dtype)
        for i in range(repeat):
            kv.push(big, grad.tostype("row_sparse"))
            ids = rng.randint(BIG[0], size=BIG[0])
            out = mx.nd.zeros(BIG, stype="row_sparse", dtype=dtype)
            kv.row_sparse_pull(big, out=out, row_ids=mx.nd.array(ids).reshape((-1, 2)))
            updated = np.ones(BIG, np.float64)
            for w in range(workers):
                updated[rows_of[w]] += (w + 1) * RATE * (i + 1)
            want = np.zeros(BIG, dtype)
            want[np.unique(ids)] = updated[np.unique(ids)]
            equal(out, want, "big row-sparse key %s (%s) round %d" % (big, dtype, i))


def check_2bit(repeat):
    threshold = 0.5
    kv.set_gradient_compression({"type": "2bit", "threshold": threshold})
    kv.set_optimizer(mx.optimizer.create("test", rescale_grad=RATE))
    keys = [("1000", SMALL), ("1200", (1211, 1211)), ("1300", BIG)]
    for key, shape in keys:
        kv.init(key, mx.nd.zeros(shape))
        kv.init(str(int(key) + 1), mx.nd.ones(shape))  # not compressed: init
    step = threshold * RATE * workers  # one quantum from every worker
    for key, shape in keys:
        out = mx.nd.ones(shape)
        kv.pull(key, out)
        equal(out, 0, "key %s before any push" % key)
        out = mx.nd.zeros(shape)
        kv.pull(str(int(key) + 1), out)
        equal(out, 1, "key %s: init is never compressed" % (int(key) + 1))
        kv.push(key, mx.nd.zeros(shape))
        kv.pull(key, out)
        equal(out, 0, "key %s after a zero push" % key)
        # Below the threshold nothing is sent; the residual carries it.
        value = 0.0
        for push, sent in ((0.4, False), (threshold - 0.4, True), (0.2, False),
                           (threshold - 0.2, True), (threshold, True)):
            kv.push(key, mx.nd.ones(shape) * push)
            value += step if sent else 0
            kv.pull(key, out)
            assert_almost_equal(out.asnumpy(), np.full(shape, value, np.float32),
                                names=("key %s" % key, "expected"))
    # Random gradients against a model of the quantizer, error feedback
    # included: every worker draws the same values.
    rng = np.random.RandomState(123)
    for key, shape in keys:
        fresh = str(int(key) + 2)
        kv.init(fresh, mx.nd.zeros(shape))
        residual = np.zeros(shape, np.float32)
        for _ in range(repeat):
            before = mx.nd.zeros(shape)
            kv.pull(fresh, before)
            grad = rng.rand(*shape).astype(np.float32)
            kv.push(fresh, mx.nd.array(grad))
            after = mx.nd.zeros(shape)
            kv.pull(fresh, after)
            carried = residual + grad
            sent = np.where(carried >= threshold, threshold,
                            np.where(carried <= -threshold, -threshold, 0)).astype(np.float32)
            residual = carried - sent
            assert_almost_equal((after - before).asnumpy(), sent * RATE * workers,
                                names=("key %s's update" % fresh, "the model's"))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=["dense", "sparse", "2bit"], required=True)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    {"dense": check_dense, "sparse": check_sparse, "2bit": check_2bit}[a.part](a.repeat)
    kv._barrier()
    print("worker %d: %s done" % (rank, a.part), flush=True)
