"""kvtrain's MXNet face: data iterators in fit (a Python DataIter subclass, in
one process and under dist_sync; CSVIter)."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import COMPAT, JOB_ENV, PY, ROOT, compat_env, launch

sys.path.insert(0, COMPAT)

import mxnet as mx  # noqa: E402
from mxnet.base import NotInKvtrain  # noqa: E402


# -- fit fed by a Python DataIter subclass (mxnet_python_iter.py) ---------------
PY_ITER = os.path.join(ROOT, "python", "tests", "mxnet_python_iter.py")
ITER_LINE = re.compile(r"resets (\d+) batches (\d+) accuracy ([0-9.]+)")


def test_fit_reads_a_python_data_iter_in_one_process(tmp_path):
    r = subprocess.run([PY, PY_ITER, "--kv-store", "local"], env=compat_env(), capture_output=True,
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
