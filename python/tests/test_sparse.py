"""Row-sparse keys from Python: kvtrain.sparse values through the local
stores, MXNet's calls (sparse.zeros, push of a RowSparseArray,
row_sparse_pull), the errors, and real jobs of Python processes for
dist_sync and dist_async on 127.0.0.1."""

import re

import numpy as np
import pytest

import kvtrain as kt
from conftest import JOB_ENV, PY, launch, lines_with

BIG = 2**40 + 7  # a row id past 32 bits


@pytest.fixture(params=["local", "device"])
def kv(request):
    return kt.kv.create(request.param)


def test_push_and_pull_rows(kv):
    kv.init("emb", kt.sparse.Table(width=3))
    kv.set_optimizer(kt.optimizer.create("sgd", learning_rate=1.0))
    ids = np.array([5, BIG, 5], np.int64)
    kv.push("emb", kt.sparse.RowSparseArray(np.ones((3, 3), np.float32), ids, (0, 3)))
    out = np.full((4, 3), 9, np.float32)
    kv.row_sparse_pull("emb", out=out, row_ids=np.array([BIG, 5, 6, 5], np.int64))
    np.testing.assert_array_equal(out[:, 0], [-1, -2, 0, -2])
    # MXNet's form: the out array gets the unique ids, ascending, and their rows.
    rsp = kt.sparse.zeros("row_sparse", (0, 3))
    kv.row_sparse_pull("emb", out=rsp, row_ids=np.array([BIG, 5, 5], np.int64))
    assert list(rsp.indices) == [5, BIG]
    np.testing.assert_array_equal(rsp.data[:, 2], [-2, -1])
    (stats,) = kv.row_sparse_stats("emb")
    assert stats["rows"] == 2 and stats["created"] == 2 and stats["updates"] == 1, stats


def test_mxnet_init_and_ftrl(kv):
    kv.init(3, kt.sparse.zeros("row_sparse", (100, 2)))
    kv.set_optimizer(kt.optimizer.Ftrl(learning_rate=0.5, lamda1=0.01))
    for _ in range(3):
        kv.push(3, kt.sparse.row_sparse_array((np.full((1, 2), 0.5, np.float32), [7]),
                                              shape=(100, 2)))
    out = np.zeros((1, 2), np.float32)
    kv.row_sparse_pull(3, out=out, row_ids=np.array([7], np.int64))
    assert (out < 0).all(), out   # FTRL moves against the gradient


def test_a_table_has_its_own_optimizer(kv):
    kv.init("emb", kt.sparse.Table(width=1, optimizer=kt.optimizer.create("sgd",
                                                                          learning_rate=2.0)))
    kv.init("w", np.zeros((1,), np.float32))
    kv.set_optimizer(kt.optimizer.create("sgd", learning_rate=0.5))
    kv.push("emb", kt.sparse.RowSparseArray(np.ones((1, 1)), [4], (0, 1)))
    kv.push("w", np.ones((1,), np.float32))
    out, w = np.zeros((1, 1), np.float32), np.zeros((1,), np.float32)
    kv.row_sparse_pull("emb", out=out, row_ids=np.array([4], np.int64))
    kv.pull("w", out=w)
    assert out[0, 0] == -2.0 and w[0] == -0.5, (out, w)


def test_initial_values_are_deterministic_and_tables_save(kv, tmp_path):
    kv.init("e", kt.sparse.Table(width=4, init="normal", scale=0.1, seed=5))
    a = np.zeros((2, 4), np.float32)
    kv.row_sparse_pull("e", out=a, row_ids=np.array([1, 2], np.int64))
    other = kt.kv.create("local")
    other.init("e", kt.sparse.Table(width=4, init="normal", scale=0.1, seed=5))
    b = np.zeros((2, 4), np.float32)
    other.row_sparse_pull("e", out=b, row_ids=np.array([1, 2], np.int64))
    np.testing.assert_array_equal(a, b)
    assert not (a[0] == a[1]).all()
    kv.push("e", kt.sparse.RowSparseArray(np.ones((1, 4), np.float32), [1], (0, 4)))
    kv.save_row_sparse("e", str(tmp_path / "e.table"))
    other.load_row_sparse("e", str(tmp_path / "e.table"))
    other.row_sparse_pull("e", out=b, row_ids=np.array([1, 2], np.int64))
    kv.row_sparse_pull("e", out=a, row_ids=np.array([1, 2], np.int64))
    np.testing.assert_array_equal(a, b)


def test_a_saved_table_reads_back_and_exports(kv, tmp_path):
    kv.init("t", kt.sparse.Table(width=3, init="uniform", scale=0.5, seed=2))
    ids = np.array([7, 2**40 + 1, 3], np.int64)
    kv.push("t", kt.sparse.RowSparseArray(np.full((3, 3), 0.25, np.float32), ids, (0, 3)))
    path = tmp_path / "t.table"
    kv.save_row_sparse("t", str(path))
    key, got_ids, rows = kt.sparse.read_table(path)
    assert key == "t"
    np.testing.assert_array_equal(got_ids, np.sort(ids))
    want = np.zeros((3, 3), np.float32)
    kv.row_sparse_pull("t", out=want, row_ids=got_ids)
    np.testing.assert_array_equal(rows, want)
    kt.sparse.export_table(path, tmp_path / "t.rows", format="binary")
    raw = (tmp_path / "t.rows").read_bytes()
    assert raw[:8] == b"KVROWS01"
    width, n = np.frombuffer(raw, np.int64, 2, 8)
    assert (width, n) == (3, 3)
    np.testing.assert_array_equal(np.frombuffer(raw, np.int64, n, 24), got_ids)
    np.testing.assert_array_equal(
        np.frombuffer(raw, np.float32, n * width, 24 + 8 * n).reshape(n, width), rows)
    kt.sparse.export_table(path, tmp_path / "t.txt")
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "t.txt", dtype=np.float64)[:, 1:]
                                  .astype(np.float32), rows)
    with pytest.raises(kt.KVTrainError, match="junk"):
        (tmp_path / "junk").write_bytes(b"junk")
        kt.sparse.read_table(tmp_path / "junk")
    with pytest.raises(ValueError, match="format 'csv'"):
        kt.sparse.export_table(path, tmp_path / "x", format="csv")


def test_bad_input_names_the_key_and_the_id(kv):
    kv.init("emb", kt.sparse.Table(width=2, num_rows=10))
    kv.init("dense", np.zeros((2,), np.float32))
    with pytest.raises(kt.KVTrainError, match="key emb: row id 10 at position 1 is outside"):
        kv.push("emb", kt.sparse.RowSparseArray(np.ones((2, 2)), [1, 10], (10, 2)))
    with pytest.raises(kt.KVTrainError, match="key emb: row id -3 at position 0 is negative"):
        kv.row_sparse_pull("emb", out=np.zeros((1, 2), np.float32),
                           row_ids=np.array([-3], np.int64))
    with pytest.raises(kt.KVTrainError, match="key emb: row ids must be int64, got float32"):
        kv.row_sparse_pull("emb", out=np.zeros((1, 2), np.float32),
                           row_ids=np.array([1], np.float32))
    with pytest.raises(kt.KVTrainError, match="key emb: output rows have shape"):
        kv.row_sparse_pull("emb", out=np.zeros((1, 3), np.float32),
                           row_ids=np.array([1], np.int64))
    with pytest.raises(kt.KVTrainError, match="key emb: is a row-sparse key"):
        kv.push("emb", np.zeros((2,), np.float32))
    with pytest.raises(kt.KVTrainError, match="key dense: is a dense key"):
        kv.push("dense", kt.sparse.RowSparseArray(np.ones((1, 2)), [1], (0, 2)))
    with pytest.raises(ValueError, match="rows start from its initializer"):
        kv.init("x", kt.sparse.row_sparse_array((np.ones((1, 2)), [1]), shape=(5, 2)))
    # Still serving.
    kv.push("emb", kt.sparse.RowSparseArray(np.ones((1, 2)), [1], (10, 2)))


SPARSE_JOB = """
    import numpy as np
    import kvtrain as kt
    kind = sys.argv[1]
    kv = kt.kv.create(kind)
    r, n = kv.rank, kv.num_workers
    kv.init('emb', kt.sparse.Table(width=2))
    kv.set_optimizer(kt.optimizer.create('sgd', learning_rate=1.0))
    ids = np.array([r, 100, 2**40 + 7, 100], np.int64)
    for step in range(3):
        kv.push('emb', kt.sparse.RowSparseArray(np.full((4, 2), r + 1, np.float32), ids, (0, 2)))
    kv.barrier()
    out = np.zeros((3, 2), np.float32)
    kv.row_sparse_pull('emb', out=out, row_ids=np.array([100, 2**40 + 7, r], np.int64))
    held = sum(s['rows'] for s in kv.row_sparse_stats('emb'))
    assert held == 4, kv.row_sparse_stats('emb')   # rows 0, 1, 100 and 2**40 + 7
    print('RESULT rank=%d a=%g b=%g c=%g' % (r, out[0, 0], out[1, 0], out[2, 0]))
"""


@pytest.mark.parametrize("kind", ["dist_sync", "dist_async"])
def test_real_job_sums_rows_exactly(script, kind):
    code, out = launch(["-n", "2", "-s", "2"] + JOB_ENV + [PY, script(SPARSE_JOB), kind])
    assert code == 0, out
    results = sorted(lines_with(out, "RESULT"))
    assert len(results) == 2, out
    for r, line in enumerate(results):
        v = dict(re.findall(r"(\w+)=(-?[\d.]+)", line))
        # 3 steps of (1 + 2) summed over workers; row 100 is pushed twice a step.
        assert v["a"] == "-18" and v["b"] == "-9", line
        assert v["c"] == str(-3 * (r + 1)), line
