"""kvtrain.torch: PyTorch models trained through kvtrain's stores and servers.
dist_sync with 2 workers x 50 equals single-process PyTorch at 100;
dist_async trains as well as dist_sync; a killed worker or server ends the
job naming it; a resumed job is bit-identical; bad tensors are clear errors."""

import os
import re
import signal
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # Debian's python3-torch (tools/setup.sh)

import kvtrain as kt  # noqa: E402
import kvtrain.torch as kvt  # noqa: E402
from conftest import JOB_ENV, PY, ROOT, launch, lines_with, processes_with, start_launch  # noqa: E402

TORCH_MNIST = os.path.join(ROOT, "examples", "python", "train_torch_mnist.py")

SYNC_JOB = """
    import numpy as np, torch
    import kvtrain.torch as kvt
    torch.set_num_threads(1)
    kvt.init(sys.argv[1])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    opt = kvt.DistributedOptimizer(model.named_parameters(), kvstore=sys.argv[1],
                                   optimizer='sgd',
                                   optimizer_params={'learning_rate': 0.1, 'momentum': 0.9})
    rng = np.random.RandomState(1)
    x = rng.randn(50 * 100, 20).astype(np.float32)
    y = rng.randint(0, 3, size=50 * 100)
    r = kvt.rank()
    for step in range(50):
        rows = slice(step * 100 + r * 50, step * 100 + r * 50 + 50)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x[rows])),
                                                 torch.from_numpy(y[rows]))
        loss.backward()
        opt.step()
    if r == 0:
        np.save(sys.argv[2], np.concatenate([p.detach().numpy().ravel()
                                             for p in model.parameters()]))
    print('done rank', r)
"""


def single_process_reference():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.RandomState(1)
    x = rng.randn(50 * 100, 20).astype(np.float32)
    y = rng.randint(0, 3, size=50 * 100)
    for step in range(50):
        rows = slice(step * 100, step * 100 + 100)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(x[rows])),
                                          torch.from_numpy(y[rows])).backward()
        opt.step()
    return np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])


@pytest.mark.parametrize("kind", ["dist_sync", "dist_allreduce"])
def test_two_workers_at_50_equal_one_process_at_100(script, tmp_path, kind):
    out_file = str(tmp_path / "weights.npy")
    servers = "0" if kind == "dist_allreduce" else "2"
    code, out = launch(["-n", "2", "-s", servers] + JOB_ENV
                       + [PY, script(SYNC_JOB), kind, out_file])
    assert code == 0, out
    got = np.load(out_file)
    want = single_process_reference()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert np.abs(got - want).max() < 1e-4


def test_local_store_matches_torch_optim():
    torch.manual_seed(3)
    a = torch.nn.Linear(5, 2)
    b = torch.nn.Linear(5, 2)
    b.load_state_dict(a.state_dict())
    mine = kvt.DistributedOptimizer(a.named_parameters(), kvstore="local", optimizer="sgd",
                                    optimizer_params={"learning_rate": 0.5})
    ref = torch.optim.SGD(b.parameters(), lr=0.5)
    x = torch.randn(8, 5)
    for _ in range(5):
        for m, o in ((a, mine), (b, ref)):
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert kvt.rank() == 0 and kvt.num_workers() == 1
    # The parameters are the store's memory: no copies.
    assert mine._weights[0].ctypes.data == a.weight.data_ptr()


@pytest.mark.parametrize("name,params", [
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4}),
    ("nag", {"learning_rate": 0.1, "momentum": 0.9}),
    ("adam", {"learning_rate": 0.01, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}),
    ("adagrad", {"learning_rate": 0.1, "clip_gradient": 5.0}),
])
def test_every_server_optimizer_trains(name, params):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = kvt.DistributedOptimizer(model.named_parameters(), kvstore="local", optimizer=name,
                                   optimizer_params=params)
    x = torch.randn(64, 10)
    y = (x[:, 0] > 0).long()
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], (name, losses)


def test_bad_tensors_are_named():
    kvt.init("local")
    m = torch.nn.Linear(3, 2).double()
    with pytest.raises(TypeError, match=r"parameter weight is float64: kvtrain.torch takes float32"):
        kvt.DistributedOptimizer(m.named_parameters(), kvstore="local")
    p = torch.nn.Parameter(torch.zeros(4, 3).t())
    with pytest.raises(ValueError, match=r"parameter w is not contiguous"):
        kvt.DistributedOptimizer([("w", p)], kvstore="local")
    meta = torch.nn.Parameter(torch.empty(2, 2, device="meta"))
    with pytest.raises(TypeError, match=r"parameter g is on meta: kvtrain.torch takes CPU tensors"):
        kvt.DistributedOptimizer([("g", meta)], kvstore="local")

    class OnGpu(object):  # what a CUDA tensor reports (Debian's torch cannot make one)
        device = torch.device("cuda:0")
    if kt.num_gpus() == 0:
        with pytest.raises(TypeError, match=r"parameter c is on cuda:0: kvtrain.torch takes CPU "
                           r"tensors \(kvtrain sees no GPU in this process\)"):
            kvt._view("c", OnGpu())
    with pytest.raises(ValueError, match=r"root_rank=1"):
        kvt.broadcast_parameters(torch.nn.Linear(2, 2).state_dict(), root_rank=1)
    with pytest.raises(ValueError, match=r"names repeat"):
        kvt.DistributedOptimizer([("a", torch.nn.Parameter(torch.zeros(2))),
                                  ("a", torch.nn.Parameter(torch.zeros(2)))], kvstore="local")


def accuracy(out):
    acc = lines_with(out, "Test accuracy=")
    assert len(acc) == 2, out
    values = {float(l.split("=")[1]) for l in acc}
    assert len(values) == 1, out  # dist_async too: both evaluate the servers' final model
    return min(values)


def test_async_trains_within_two_percent_of_sync():
    # dist_async applies each worker's gradient on its own: with 2 workers,
    # half the learning rate makes the same step per global batch. After 3
    # epochs sync reaches 0.8592 here and async 0.852-0.853 (it varies with
    # which worker's gradient lands first; bench/async_accuracy_bench.py
    # measures more epochs and seeds).
    flags = ["--num-epochs", "3", "--lr-step-epochs", "2", "--disp-batches", "0",
             "--threads", "1"]
    code, sync_out = launch(["-n", "2", "-s", "2"] + JOB_ENV
                            + [PY, TORCH_MNIST, "--kv-store", "dist_sync", "--lr", "0.05"]
                            + flags, timeout=600)
    assert code == 0, sync_out
    sync_acc = accuracy(sync_out)
    assert sync_acc > 0.84, sync_out
    code, async_out = launch(["-n", "2", "-s", "2"] + JOB_ENV
                             + [PY, TORCH_MNIST, "--kv-store", "dist_async", "--lr", "0.025"]
                             + flags, timeout=600)
    assert code == 0, async_out
    assert abs(accuracy(async_out) - sync_acc) <= 0.02, (async_out, sync_acc)


def test_bounded_staleness_through_the_bridge():
    # dist_ssp with the example's flags: every worker runs the same steps
    # (its part is uneven: 3030 examples in batches of 100), each epoch
    # reports this worker's staleness, and both end with the same model.
    code, out = launch(["-n", "2", "-s", "1"] + JOB_ENV
                       + [PY, TORCH_MNIST, "--kv-store", "dist_ssp", "--staleness", "1",
                          "--async-lr", "staleness", "--num-examples", "3030",
                          "--num-epochs", "2", "--disp-batches", "0", "--threads", "1"],
                       timeout=300)
    assert code == 0, out
    epochs = lines_with(out, "Validation-accuracy=")
    assert len(epochs) == 4, out
    for line in epochs:
        assert re.search(r"staleness-mean=[0-9.]+ staleness-max=\d+ ", line), line
    accuracy(out)


def test_2bit_through_the_bridge():
    # The example's --gc-* flags reach the store; MXNet's threshold 0.5
    # trains (momentum correction) instead of diverging to chance (0.10).
    code, out = launch(["-n", "2", "-s", "1"] + JOB_ENV
                       + [PY, TORCH_MNIST, "--kv-store", "dist_sync", "--gc-type", "2bit",
                          "--gc-threshold", "0.5", "--num-epochs", "1", "--disp-batches", "0",
                          "--threads", "1"], timeout=300)
    assert code == 0, out
    assert accuracy(out) > 0.7, out  # 0.80 in 1 epoch here


def test_resume_is_bit_identical(tmp_path):
    flags = ["--kv-store", "dist_sync", "--num-examples", "3000", "--disp-batches", "0",
             "--threads", "1", "--lr-step-epochs", "1"]  # the schedule's state resumes too
    whole, part = str(tmp_path / "whole"), str(tmp_path / "part")
    job = ["-n", "2", "-s", "2"] + JOB_ENV + [PY, TORCH_MNIST] + flags
    code, out = launch(job + ["--num-epochs", "2", "--model-prefix", whole])
    assert code == 0, out
    code, out = launch(job + ["--num-epochs", "1", "--model-prefix", part])
    assert code == 0, out
    code, out = launch(job + ["--num-epochs", "2", "--model-prefix", part, "--load-epoch", "1"])
    assert code == 0, out
    a = torch.load(whole + "-0002.pt")["model"]
    b = torch.load(part + "-0002.pt")["model"]
    assert sorted(a) == sorted(b)
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("role", ["worker", "server"])
def test_a_killed_node_ends_the_job_naming_it(role):
    marker = "torch-kill-%d-%s" % (os.getpid(), role)
    p = start_launch(["-n", "2", "-s", "2", "--env", "KVTRAIN_TEST_MARKER=" + marker] + JOB_ENV
                     + [PY, TORCH_MNIST, "--kv-store", "dist_sync", "--num-epochs", "50",
                        "--disp-batches", "20", "--threads", "1"])
    try:
        deadline = time.monotonic() + 120
        out = []
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            out.append(line)
            if "Batch[20]" in line:
                break
        else:
            pytest.fail("no progress:\n" + "".join(out))
        victims = processes_with(marker, role)
        assert victims, "no %s process found" % role
        killed = time.monotonic()
        os.kill(victims[0], signal.SIGKILL)
        rest, _ = p.communicate(timeout=60)
        elapsed = time.monotonic() - killed
    finally:
        if p.poll() is None:
            p.kill()
    text = "".join(out) + rest
    assert p.returncode != 0, text
    assert re.search(r"%s \d+ .*failed with (signal SIGKILL|exit code 137)" % role, text), text
    assert elapsed < 30, text
