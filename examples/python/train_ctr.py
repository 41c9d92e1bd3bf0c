#!/usr/bin/env python3
"""Trains a wide-and-deep click-through-rate model on a LibSVM click log, its
embedding tables on kvtrain's servers (kvtrain.torch.ServerEmbeddingBag), its
MLP through kvtrain.torch.DistributedOptimizer. As one process, or as every
process of a job:

    /usr/bin/python3 examples/python/train_ctr.py --kv-store local
    tracker/launch.py -n 2 -s 2 --launcher local \\
        /usr/bin/python3 examples/python/train_ctr.py --kv-store dist_sync
    /usr/bin/python3 examples/python/train_ctr.py --baseline   # PyTorch alone

The log: one impression per line, `label id:1 id:1 ...`, one int64 id per
field (tools/make_click_log.py writes such logs: field f's ids are
f * 2**40 + a local id). Without --train, a log of --rows rows (and a test
log of --test-rows) is generated into a temporary folder first.

The model: wide = the sum of the row's ids' weights (a width-1 table) + a
bias; deep = each field's id's 16-wide embedding (one table: one id per
field, so the batch's (batch, fields) ids give (batch, fields * 16)) ->
MLP 128-64-1; logit = wide + deep; loss: binary cross-entropy. Each worker
trains on rows i with i % workers == rank; every worker runs as many steps
per epoch as the smallest share has batches (the last batch may be short).
The tables' rows of the next batch are prefetched during backward.

--optimizer (adagrad by default) trains the tables and the MLP alike (a
table may also have its own: ServerEmbeddingBag's optimizer=), on the
servers for dist stores
(rescale_grad 1 / workers for dist_sync, so 2 workers x B train as one
process at 2B). --baseline trains the same model with PyTorch alone:
nn.EmbeddingBag(sparse=True) tables (ids remapped to dense indices) with
torch.optim.Adagrad / SparseAdam / SGD, and the same optimizer for the MLP.

Rank 0 prints each epoch's train log-loss (its own share), the test AUC and
log-loss and the job's training samples/s, then
`FINAL auc=... logloss=... samples_per_s=...`.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

FIELD_SHIFT = 40
DEEP_DIM = 16


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kv-store", default="local", help="local, dist_sync or dist_async")
    p.add_argument("--baseline", action="store_true",
                   help="train with PyTorch alone (one process; no kvtrain store)")
    p.add_argument("--train", default="", help="LibSVM training log (default: generate one)")
    p.add_argument("--test", default="", help="LibSVM test log (default: generate one)")
    p.add_argument("--rows", type=int, default=100000, help="rows of a generated training log")
    p.add_argument("--test-rows", type=int, default=20000, help="rows of a generated test log")
    p.add_argument("--vocab", type=int, default=10000,
                   help="ids per field of a generated log (make_click_log.py --vocab)")
    p.add_argument("--batch-size", type=int, default=256, help="rows per batch (per worker)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.01, help="learning rate")
    p.add_argument("--optimizer", default="adagrad", choices=["adagrad", "adam", "sgd", "ftrl"],
                   help="the store's optimizer (tables and MLP; ftrl: not with --baseline)")
    p.add_argument("--scale", type=float, default=0.01,
                   help="standard deviation of the tables' initial rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-prefetch", action="store_true",
                   help="pull each batch's rows in its forward instead of during the "
                        "previous backward")
    p.add_argument("--model-prefix", default="",
                   help="after each epoch rank 0 saves a checkpoint: P-NNNN-wide.table, "
                        "P-NNNN-deep.table, P-NNNN.states (the optimizer's) and last "
                        "P-NNNN.pt (the MLP)")
    p.add_argument("--load-epoch", type=int, default=0,
                   help="resume from the checkpoint of this epoch (needs --model-prefix)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (0: KVTRAIN_NUM_THREADS from launch.py, else torch's)")
    a = p.parse_args(argv)
    if bool(a.train) != bool(a.test):
        p.error("--train and --test go together")
    if a.baseline and a.kv_store != "local":
        p.error("--baseline trains in one process: drop --kv-store %s" % a.kv_store)
    if a.baseline and a.optimizer == "ftrl":
        p.error("--baseline: PyTorch has no sparse FTRL; use adagrad, adam or sgd")
    return a


def read_libsvm(path):
    """(ids int64 (rows, fields), labels float32 (rows,)): one id per field."""
    with open(path, "rb") as f:
        text = f.read()
    first = text[:text.find(b"\n")].split()
    if not first:
        raise ValueError("%s: empty first line" % path)
    fields = len(first) - 1
    values = np.fromstring(text.replace(b":", b" ").decode("ascii"), dtype=np.int64, sep=" ")
    width = 1 + 2 * fields
    if fields < 1 or values.size % width:
        raise ValueError("%s: expected `label id:1 ...` with %d ids on every line" %
                         (path, fields))
    values = values.reshape(-1, width)
    ids = np.ascontiguousarray(values[:, 1::2])
    if (values[:, 2::2] != 1).any():
        raise ValueError("%s: every feature's value must be 1 (categorical ids)" % path)
    if ((ids >> FIELD_SHIFT) != np.arange(fields)).any():
        raise ValueError("%s: the k-th id of a line must be field k's (k * 2**40 + local id)"
                         % path)
    return ids, (values[:, 0] > 0).astype(np.float32)


def generate(a):
    tool = [p for p in (os.path.join(ROOT, "tools", "make_click_log.py"),
                        os.path.join(HERE, "make_click_log.py")) if os.path.exists(p)]
    if not tool:
        raise SystemExit("train_ctr: tools/make_click_log.py is not here to generate a log: "
                         "pass --train and --test")
    d = tempfile.mkdtemp(prefix="kvtrain-ctr-")
    train, test = os.path.join(d, "train.libsvm"), os.path.join(d, "test.libsvm")
    subprocess.run([sys.executable, tool[0], "--rows", str(a.rows), "--out", train,
                    "--test-rows", str(a.test_rows), "--test-out", test, "--vocab", str(a.vocab)],
                   check=True, stderr=subprocess.DEVNULL)
    return d, train, test


def auc(labels, scores):
    """Area under the ROC curve (ties count half), numpy only."""
    labels = np.asarray(labels) > 0
    pos = int(labels.sum())
    neg = labels.size - pos
    if pos == 0 or neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    mean_rank = ends - (counts - 1) / 2.0        # 1-based average rank of each value
    rank_sum = mean_rank[inverse][labels].sum()
    return float((rank_sum - pos * (pos + 1) / 2.0) / (pos * neg))


def logloss(labels, probs):
    p = np.clip(probs, 1e-7, 1 - 1e-7)
    return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


def mlp(fields):
    return nn.Sequential(nn.Linear(fields * DEEP_DIM, 128), nn.ReLU(), nn.Linear(128, 64),
                         nn.ReLU(), nn.Linear(64, 1))


class WideDeep(nn.Module):
    """wide(ids) + bias + mlp(deep(ids)); `wide` and `deep` are EmbeddingBag-like
    modules of widths 1 and 16, `index` maps the file's ids to theirs."""

    def __init__(self, fields, wide, deep, index=None):
        super(WideDeep, self).__init__()
        self.fields = fields
        self.mlp = mlp(fields)
        self.bias = nn.Parameter(torch.zeros(1))
        self.wide = wide
        self.deep = deep
        self.index = index

    def forward(self, ids):
        if self.index is not None:
            ids = self.index(ids)
        batch = ids.shape[0]
        wide = self.wide(ids).reshape(batch)                   # sum over the row's ids
        deep = self.deep(ids.reshape(-1, 1)).reshape(batch, self.fields * DEEP_DIM)
        return wide + self.bias + self.mlp(deep).reshape(batch)

    def prefetch(self, ids):
        self.wide.prefetch(ids)
        self.deep.prefetch(ids.reshape(-1, 1))


def evaluate(model, ids, labels, batch=4096):
    model.eval()
    out = []
    with torch.no_grad():
        for s in range(0, len(ids), batch):
            out.append(torch.sigmoid(model(torch.from_numpy(ids[s:s + batch]))).numpy())
    model.train()
    probs = np.concatenate(out).astype(np.float64)
    return auc(labels, probs), logloss(labels, probs)


def baseline_parts(a, fields, train_ids, test_ids):
    """nn.EmbeddingBag(sparse=True) tables over dense indices f * V + local."""
    vocab = int(max((train_ids & ((1 << FIELD_SHIFT) - 1)).max(),
                    (test_ids & ((1 << FIELD_SHIFT) - 1)).max())) + 1
    n = fields * vocab
    wide = nn.EmbeddingBag(n, 1, mode="sum", sparse=True)
    deep = nn.EmbeddingBag(n, DEEP_DIM, mode="sum", sparse=True)
    with torch.no_grad():
        wide.weight.normal_(0, a.scale)
        deep.weight.normal_(0, a.scale)

    def index(ids):
        return (ids >> FIELD_SHIFT) * vocab + (ids & ((1 << FIELD_SHIFT) - 1))
    wide.prefetch = deep.prefetch = lambda ids: None
    return wide, deep, index


def torch_optimizers(a, model):
    tables = [model.wide.weight, model.deep.weight]
    dense = [p for n, p in model.named_parameters() if not n.startswith(("wide.", "deep."))]
    if a.optimizer == "adagrad":
        # kvtrain's AdaGrad divides by sqrt(h + 1e-7), torch's by sqrt(h) + eps:
        # eps = sqrt(1e-7) damps rare rows' first steps alike.
        eps = 1e-7 ** 0.5
        return [torch.optim.Adagrad(tables, lr=a.lr, eps=eps),
                torch.optim.Adagrad(dense, lr=a.lr, eps=eps)]
    if a.optimizer == "adam":
        return [torch.optim.SparseAdam(tables, lr=a.lr), torch.optim.Adam(dense, lr=a.lr)]
    return [torch.optim.SGD(tables, lr=a.lr), torch.optim.SGD(dense, lr=a.lr)]


class TorchSteps(object):
    """A list of torch optimizers as one (zero_grad, step)."""

    def __init__(self, opts):
        self.opts = opts

    def zero_grad(self):
        for o in self.opts:
            o.zero_grad()

    def step(self):
        for o in self.opts:
            o.step()


def checkpoint_paths(prefix, epoch):
    """The files of epoch `epoch`'s checkpoint; the .pt file completes it."""
    base = "%s-%04d" % (prefix, epoch)
    return {"wide": base + "-wide.table", "deep": base + "-deep.table",
            "states": base + ".states", "mlp": base + ".pt"}


def main(argv=None):
    a = parse_args(argv)
    if a.load_epoch and (a.baseline or not a.model_prefix or a.load_epoch >= a.epochs + 1):
        raise SystemExit("train_ctr: --load-epoch=%d needs --model-prefix, no --baseline and "
                         "an epoch <= --epochs=%d" % (a.load_epoch, a.epochs))
    if a.model_prefix and a.baseline:
        raise SystemExit("train_ctr: --model-prefix saves kvtrain's tables: not with --baseline")
    if not a.baseline:
        import kvtrain.torch as kvt
        kv = kvt.init(a.kv_store)  # servers and the scheduler serve here and exit
        rank, workers = kv.rank, kv.num_workers
    else:
        rank, workers = 0, 1
    threads = a.threads or int(os.environ.get("KVTRAIN_NUM_THREADS", "0") or 0)
    if threads:
        torch.set_num_threads(threads)

    tmp = None
    if a.train:
        train_path, test_path = a.train, a.test
    else:
        tmp, train_path, test_path = generate(a)
    try:
        t0 = time.time()
        train_ids, train_y = read_libsvm(train_path)
        test_ids, test_y = read_libsvm(test_path)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    fields = train_ids.shape[1]
    if test_ids.shape[1] != fields:
        raise SystemExit("train_ctr: the train log has %d fields, the test log %d"
                         % (fields, test_ids.shape[1]))
    mine = np.arange(rank, len(train_ids), workers)
    share = len(range(workers - 1, len(train_ids), workers))   # the smallest share
    if share == 0:
        raise SystemExit("train_ctr: %d training rows for %d workers" % (len(train_ids), workers))
    steps = -(-share // a.batch_size)
    if rank == 0:
        print("train_ctr: %d train rows (%d per worker), %d test rows, %d fields, read in "
              "%.1f s; %d steps of %d per epoch per worker" %
              (len(train_ids), len(mine), len(test_ids), fields, time.time() - t0, steps,
               a.batch_size), flush=True)

    torch.manual_seed(a.seed)
    if a.baseline:
        wide, deep, index = baseline_parts(a, fields, train_ids, test_ids)
        model = WideDeep(fields, wide, deep, index)
        opt = TorchSteps(torch_optimizers(a, model))
    else:
        init = dict(init="normal", scale=a.scale, seed=a.seed, kvstore=kv)
        wide = kvt.ServerEmbeddingBag("ctr/wide", 0, 1, mode="sum", **init)
        deep = kvt.ServerEmbeddingBag("ctr/deep", 0, DEEP_DIM, mode="sum", **init)
        model = WideDeep(fields, wide, deep)
        if a.load_epoch:
            ckpt = checkpoint_paths(a.model_prefix, a.load_epoch)
            if not os.path.exists(ckpt["mlp"]):
                raise SystemExit("train_ctr: no checkpoint of epoch %d: %s is missing"
                                 % (a.load_epoch, ckpt["mlp"]))
            model.load_state_dict(torch.load(ckpt["mlp"]))
        # The store's optimizer: the tables' too (set before their first push).
        # Rank 0's MLP (the loaded one when resuming) is every worker's.
        opt = kvt.DistributedOptimizer(model.named_parameters(), kvstore=kv,
                                       optimizer=a.optimizer,
                                       optimizer_params={"learning_rate": a.lr})
        if a.load_epoch:
            opt.load_states(ckpt["states"])   # every worker; rank 0 loads
            if rank == 0:
                wide.load(ckpt["wide"])
                deep.load(ckpt["deep"])
            kv.barrier()
    loss_fn = nn.BCEWithLogitsLoss()
    prefetch = not a.no_prefetch and not a.baseline

    total_time = total_samples = 0.0
    result = None
    for epoch in range(a.load_epoch, a.epochs):
        rng = np.random.RandomState(a.seed * 1000 + epoch * workers + rank)
        order = mine[rng.permutation(len(mine))[:share]]
        batches = [order[s * a.batch_size:(s + 1) * a.batch_size] for s in range(steps)]
        loss_sum = seen = 0.0
        start = time.time()
        x_next = torch.from_numpy(train_ids[batches[0]])
        if prefetch:
            model.prefetch(x_next)
        for s in range(steps):
            x, y = x_next, torch.from_numpy(train_y[batches[s]])
            opt.zero_grad()
            logit = model(x)
            if s + 1 < steps:
                x_next = torch.from_numpy(train_ids[batches[s + 1]])
                if prefetch:
                    model.prefetch(x_next)   # issued right after backward's pushes
            loss = loss_fn(logit, y)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(y)
            seen += len(y)
        if not a.baseline:
            wide.wait()
            deep.wait()
        elapsed = time.time() - start
        total_time += elapsed
        total_samples += seen * workers
        if not a.baseline and epoch + 1 == a.epochs:
            opt.synchronize()   # dist_async: the servers' final MLP on every worker
        if a.model_prefix:
            # Every worker's pushes of the epoch are in before rank 0 saves,
            # and none of the next epoch's until it has.
            kv.barrier()
            if rank == 0:
                ckpt = checkpoint_paths(a.model_prefix, epoch + 1)
                wide.save(ckpt["wide"])
                deep.save(ckpt["deep"])
                opt.save_states(ckpt["states"])
                torch.save(model.state_dict(), ckpt["mlp"] + ".tmp")
                os.replace(ckpt["mlp"] + ".tmp", ckpt["mlp"])
            kv.barrier()
        if rank == 0:
            test_auc, test_loss = evaluate(model, test_ids, test_y)
            result = (test_auc, test_loss)
            print("Epoch[%d] train-logloss=%.4f test-auc=%.4f test-logloss=%.4f "
                  "samples_per_s=%.0f time=%.2f" % (epoch, loss_sum / seen, test_auc,
                                                    test_loss, seen * workers / elapsed,
                                                    elapsed), flush=True)
    if rank == 0:
        print("FINAL auc=%.4f logloss=%.4f samples_per_s=%.0f%s" %
              (result[0], result[1], total_samples / total_time,
               " (baseline: PyTorch alone)" if a.baseline else " (kvstore %s, %d workers)"
               % (a.kv_store, workers)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
