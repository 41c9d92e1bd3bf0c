"""Failover through the Python face and the torch bridge: a dist_sync job of
the Python example, and of the torch example, started with --server-replicas 1
loses a server to SIGKILL in its second epoch, goes on, and ends with the
checkpoint of a job without copies that lost nothing, byte for byte; started
with --max-restarts 1, it loses a worker instead, which the launcher starts
again and which goes on where the job is, with the same result
(tests/faults/failover_test.py and worker_restart_test.py do the same with
the C++ example)."""

import os
import re
import signal
import time

import pytest

from conftest import JOB_ENV, PY, ROOT, TRAIN_MNIST_PY, launch, processes_with, start_launch

torch = pytest.importorskip("torch")

TORCH_MNIST = os.path.join(ROOT, "examples", "python", "train_torch_mnist.py")


def run(program, flags, prefix, replicas, kill_at=None, role="server", rank=1, restarts=0):
    marker = "failover-%d-%s" % (os.getpid(), os.path.basename(prefix))
    args = (["-n", "2", "-s", "3", "--server-replicas", str(replicas),
             "--max-restarts", str(restarts),
             "--env", "KVTRAIN_TEST_MARKER=" + marker] + JOB_ENV +
            [PY, program] + flags + ["--model-prefix", prefix])
    if kill_at is None:
        code, out = launch(args, timeout=300)
        assert code == 0, out
        return out
    p = start_launch(args)
    out = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            out.append(line)
            if kill_at in line or not line:
                break
        assert kill_at in out[-1], "no progress:\n" + "".join(out)
        pids = processes_with(marker, role, rank)
        assert len(pids) == 1, "%s %d: %s" % (role, rank, pids)
        os.kill(pids[0], signal.SIGKILL)
        rest, _ = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = "".join(out) + rest
    assert p.returncode == 0, text
    if role == "server":
        assert "server %d failed with signal SIGKILL; the job goes on without it" % rank in text, \
            text
        # The first answer after the loss comes from whichever live server
        # answers first: the dead one's copy, or another one.
        assert re.search(r"resumed, answered by server (?!%d )\d+ " % rank, text), text
    else:
        assert ("worker %d failed with signal SIGKILL; starting it again (restart 1 of 1)"
                % rank) in text, text
        assert re.search(r"worker %d \([^)]*\) is back \(started again, time 1\)" % rank,
                         text), text
        assert re.search(r"\[worker %d\] .*started again; the job is at step [1-9]" % rank,
                         text), text
    return text


_PLAIN = {}


def plain_run(tmp_path_factory, program, flags):
    """The job without copies or kills (the reference), once per program."""
    key = (program, tuple(flags))
    if key not in _PLAIN:
        prefix = str(tmp_path_factory.mktemp("plain") / "plain")
        run(program, flags, prefix, 0)
        _PLAIN[key] = prefix
    return _PLAIN[key]


FLAGS = ["--kv-store", "dist_sync", "--num-examples", "4000", "--num-epochs", "3",
         "--disp-batches", "10", "--seed", "3"]


def test_the_python_example_loses_nothing(tmp_path, tmp_path_factory):
    plain, killed = plain_run(tmp_path_factory, TRAIN_MNIST_PY, FLAGS), str(tmp_path / "killed")
    out = run(TRAIN_MNIST_PY, FLAGS, killed, 1, kill_at="Epoch[1] Batch[10]")
    assert len(re.findall(r" servers-lost=1\.0* failover-pause-seconds=", out)) == 2, out
    for suffix in ("-0003.params", "-0003.states"):
        with open(plain + suffix, "rb") as a, open(killed + suffix, "rb") as b:
            assert a.read() == b.read(), suffix


def test_the_torch_example_loses_nothing(tmp_path, tmp_path_factory):
    flags = FLAGS + ["--threads", "1"]
    plain, killed = plain_run(tmp_path_factory, TORCH_MNIST, flags), str(tmp_path / "killed")
    out = run(TORCH_MNIST, flags, killed, 1, kill_at="Epoch[1] Batch[10]")
    assert len(re.findall(r" servers-lost=1 failover-pause-seconds=", out)) == 2, out
    a = torch.load(plain + "-0003.pt")["model"]
    b = torch.load(killed + "-0003.pt")["model"]
    assert sorted(a) == sorted(b)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    with open(plain + "-0003.states", "rb") as x, open(killed + "-0003.states", "rb") as y:
        assert x.read() == y.read()


def same_checkpoint(plain, other, suffixes):
    for suffix in suffixes:
        with open(plain + suffix, "rb") as a, open(other + suffix, "rb") as b:
            assert a.read() == b.read(), suffix


def test_the_python_example_goes_on_without_a_worker(tmp_path, tmp_path_factory):
    plain, killed = plain_run(tmp_path_factory, TRAIN_MNIST_PY, FLAGS), str(tmp_path / "killed")
    run(TRAIN_MNIST_PY, FLAGS, killed, 0, kill_at="Epoch[1] Batch[10]", role="worker",
        rank=1, restarts=1)
    same_checkpoint(plain, killed, ("-0003.params", "-0003.states"))


def test_the_torch_example_goes_on_without_a_worker(tmp_path, tmp_path_factory):
    flags = FLAGS + ["--threads", "1"]
    plain, killed = plain_run(tmp_path_factory, TORCH_MNIST, flags), str(tmp_path / "killed")
    # Worker 0 writes the checkpoints.
    run(TORCH_MNIST, flags, killed, 0, kill_at="Epoch[1] Batch[10]", role="worker", rank=0,
        restarts=1)
    a = torch.load(plain + "-0003.pt")["model"]
    b = torch.load(killed + "-0003.pt")["model"]
    assert sorted(a) == sorted(b)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    same_checkpoint(plain, killed, ("-0003.states",))
