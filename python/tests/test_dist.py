"""Real jobs of Python processes started by tracker/launch.py on 127.0.0.1:
every dist store type with exact sums, the GIL released while a call
blocks, Ctrl-C stopping the whole job, and examples/python/train_mnist.py
against examples/train_mnist."""

import os
import re
import subprocess
import time

import pytest

from conftest import JOB_ENV, PY, ROOT, TRAIN_MNIST_CC, TRAIN_MNIST_PY, launch, lines_with

SUMS = """
    import numpy as np
    import kvtrain as kt
    kind = sys.argv[1]
    kv = kt.kv.create(kind)          # servers and the scheduler serve here
    if kind == 'dist_ssp':
        kv.set_async_options(staleness=0, lr='staleness')  # each step waits for both
    r, n = kv.rank, kv.num_workers
    f = lambda shape, v: np.full(shape, v, np.float32)
    kv.init('a', f((3, 5), 100 + r))  # rank 0's value wins
    kv.init([1, 2], [f((1000,), 0), f((200000,), 0)])  # key 2 spans both servers
    a = f((3, 5), -1)
    kv.pull('a', out=a)
    assert (a == 100).all(), a
    kv.barrier()
    kv.push('a', f((3, 5), r + 1))
    kv.barrier()
    kv.pull('a', out=a)
    k1, k2 = f((1000,), 0), f((200000,), 0)
    kv.pushpull([1, 2], [f((1000,), r + 1), [f((200000,), r + 1), f((200000,), 1)]],
                out=[k1, k2])
    assert (k1 == 3).all() or kind == 'dist_async', k1   # sync: the sum came back
    kv.barrier()
    kv.pull([1, 2], out=[k1, k2])     # async: every push is in now
    kv.set_optimizer(kt.optimizer.create('sgd', learning_rate=1.0, rescale_grad=1.0))
    kv.init('w', f((7,), 0))
    kv.push('w', f((7,), 1))
    kv.barrier()
    w = f((7,), 0)
    kv.pull('w', out=w)
    for name, v in (('a', a), ('k1', k1), ('k2', k2), ('w', w)):
        assert (v == v.flat[0]).all(), (name, v)
    pushes = kv.staleness_report()['pushes'] if kind in ('dist_async', 'dist_ssp') else 0
    print('RESULT rank=%d of %d a=%g k1=%g k2=%g w=%g pushes=%d'
          % (r, n, a.flat[0], k1[0], k2[0], w[0], pushes))
"""


@pytest.mark.parametrize("kind", ["dist_sync", "dist_device_sync", "dist_async", "dist_ssp",
                                  "dist_allreduce"])
def test_every_dist_type_sums_exactly(script, kind):
    servers = "0" if kind == "dist_allreduce" else "2"
    code, out = launch(["-n", "2", "-s", servers] + JOB_ENV + [PY, script(SUMS), kind])
    assert code == 0, out
    results = sorted(lines_with(out, "RESULT"))
    assert len(results) == 2, out
    for r, line in enumerate(results):
        values = dict(re.findall(r"(\w+)=(-?[\d.]+)", line))
        assert values["rank"] == str(r)
        if kind in ("dist_async", "dist_ssp"):
            # Without an optimizer every push accumulates into the stored
            # value; with one, each push is its own update.
            assert values["a"] == "103", line    # 100 + 1 + 2
            assert values["k1"] == "3", line     # 0 + 1 + 2, once both pushed
            assert values["k2"] == "5", line
            # dist_ssp's staleness-aware updates: both read w at Init, so
            # the second push to arrive missed one update and takes half
            # the learning rate.
            assert values["w"] == ("-1.5" if kind == "dist_ssp" else "-2"), line
            # a, key 1, the pieces of key 2, w: since Init.
            assert int(values["pushes"]) >= 4, line
        else:
            assert values["a"] == "3", line       # 1 + 2
            assert values["k1"] == "3", line
            assert values["k2"] == "5", line      # (1 + 1) + (2 + 1), two devices on one worker
            assert values["w"] == "-2", line      # 0 - 1.0 x (1 + 1)


def test_a_blocked_call_releases_the_gil(script):
    path = script("""
        import threading, time
        import numpy as np
        import kvtrain as kt
        kv = kt.kv.create('dist_sync')
        kv.init(0, np.zeros((10,), np.float32))
        if kv.rank == 1:
            time.sleep(2)            # worker 0's pushpull waits for this push
            kv.pushpull(0, np.ones((10,), np.float32))
        else:
            count = [0]
            stop = threading.Event()
            def spin():
                while not stop.is_set():
                    count[0] += 1
            t = threading.Thread(target=spin)
            t.start()
            time.sleep(0.1)
            before, t0 = count[0], time.time()
            v = np.ones((10,), np.float32)
            kv.pushpull(0, v)
            blocked, ran = time.time() - t0, count[0] - before
            stop.set()
            t.join()
            print('GIL blocked=%.2f ran=%d sum=%g' % (blocked, ran, v[0]))
    """)
    code, out = launch(["-n", "2", "-s", "1"] + JOB_ENV + [PY, path])
    assert code == 0, out
    line = lines_with(out, "GIL blocked=")[0]
    blocked, ran, total = re.findall(r"=([\d.]+)", line)
    assert float(blocked) > 1.0, line
    assert int(ran) > 100000, line  # the other thread ran all along
    assert total == "2", line


def test_ctrl_c_in_a_worker_ends_the_whole_job(script):
    path = script("""
        import os, signal, threading, time
        import numpy as np
        import kvtrain as kt
        kv = kt.kv.create('dist_sync')
        kv.init(0, np.zeros((10,), np.float32))
        if kv.rank == 1:
            time.sleep(120)          # never pushes: worker 0 waits
        threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        try:
            kv.pushpull(0, np.ones((10,), np.float32))
        except KeyboardInterrupt:
            print('worker 0 got KeyboardInterrupt')
            raise
    """)
    start = time.monotonic()
    code, out = launch(["-n", "2", "-s", "1"] + JOB_ENV + [PY, path], timeout=120)
    elapsed = time.monotonic() - start
    assert code != 0, out
    assert "worker 0 got KeyboardInterrupt" in out
    assert "worker 0 was interrupted (KeyboardInterrupt)" in out, out
    assert elapsed < 60, out


def test_the_python_example_trains_as_the_cpp_one(tmp_path):
    flags = ["--kv-store", "dist_sync", "--num-epochs", "1", "--num-examples", "2000",
             "--disp-batches", "0"]
    code, py_out = launch(["-n", "2", "-s", "2"] + JOB_ENV + [PY, TRAIN_MNIST_PY] + flags)
    assert code == 0, py_out
    code, cc_out = launch(["-n", "2", "-s", "2"] + JOB_ENV + [TRAIN_MNIST_CC] + flags)
    assert code == 0, cc_out
    py_acc = sorted(lines_with(py_out, "Test accuracy="))
    cc_acc = sorted(lines_with(cc_out, "Test accuracy="))
    assert len(py_acc) == 2 and py_acc == cc_acc, (py_acc, cc_acc)
    train = lambda out: sorted(re.sub(r" Time cost=.*", "", l)
                               for l in lines_with(out, "Train-accuracy"))
    assert train(py_out) == train(cc_out)


def test_custom_model_trains_with_dist_sync():
    code, out = launch(["-n", "2", "-s", "2"] + JOB_ENV + [
        PY, os.path.join(ROOT, "examples", "python", "custom_model.py"),
        "--kv-store", "dist_sync", "--num-epochs", "12"])
    assert code == 0, out
    acc = [float(l.split("=")[1]) for l in lines_with(out, "Test accuracy=")]
    assert len(acc) == 2 and acc[0] == acc[1], out
    assert acc[0] > 0.9, out


def test_a_packaged_folder_runs_without_pythonpath(tmp_path):
    dest = str(tmp_path / "job")
    r = subprocess.run(["bash", os.path.join(ROOT, "tools", "python_package.sh"), dest],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert os.path.exists(os.path.join(dest, "kvtrain", "_kvtrain.so"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([PY, "train_mnist.py", "--num-epochs", "1", "--num-examples", "500",
                        "--disp-batches", "0"], cwd=dest, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Test accuracy=" in r.stdout


COMPRESSED = """
    import numpy as np
    import kvtrain as kt
    kind = sys.argv[1]
    kv = kt.kv.create(kind)
    kv.set_gradient_compression({'type': '2bit', 'threshold': 0.5})
    assert kv.gradient_compression == {'type': '2bit', 'threshold': 0.5}
    r = kv.rank
    kv.init('w', np.zeros(1000, np.float32))
    sums = []
    for step in range(4):
        out = np.zeros(1000, np.float32)
        kv.pushpull('w', np.full(1000, 0.25 if r == 0 else -0.375, np.float32), out=out)
        assert (out == out[0]).all(), out
        sums.append(float(out[0]))
    print('RESULT rank=%d sums=%s' % (r, ','.join('%g' % s for s in sums)))
"""


@pytest.mark.parametrize("kind", ["dist_sync", "dist_allreduce"])
def test_two_bit_compression_sums_are_closed_form(script, kind):
    # Rank 0 sends 0, +0.5, 0, +0.5 and rank 1 0, -0.5, -0.5, -0.5
    # (threshold 0.5, error feedback): the step sums are 0, 0, -0.5, 0.
    servers = "0" if kind == "dist_allreduce" else "1"
    code, out = launch(["-n", "2", "-s", servers] + JOB_ENV + [PY, script(COMPRESSED), kind])
    assert code == 0, out
    results = sorted(lines_with(out, "RESULT"))
    assert len(results) == 2, out
    for line in results:
        assert line.endswith("sums=0,0,-0.5,0"), line


@pytest.mark.parametrize("where", ["workers", "servers"])
def test_the_python_example_compresses_as_the_cpp_one(where):
    # By default both run the optimizer on the workers from the servers'
    # level answers; --update_on_kvstore puts it on the servers.
    flags = ["--kv-store", "dist_sync", "--num-epochs", "1", "--num-examples", "2000",
             "--disp-batches", "0", "--gc-type", "2bit", "--gc-threshold", "40"]
    if where == "servers":
        flags.append("--update_on_kvstore")
    code, py_out = launch(["-n", "2", "-s", "2"] + JOB_ENV + [PY, TRAIN_MNIST_PY] + flags)
    assert code == 0, py_out
    code, cc_out = launch(["-n", "2", "-s", "2"] + JOB_ENV + [TRAIN_MNIST_CC] + flags)
    assert code == 0, cc_out
    for out in (py_out, cc_out):
        assert ("the workers run the optimizer" in out) == (where == "workers"), out
    py_acc = sorted(lines_with(py_out, "Test accuracy="))
    assert len(py_acc) == 2 and py_acc == sorted(lines_with(cc_out, "Test accuracy=")), py_out
