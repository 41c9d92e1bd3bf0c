"""The flags every Python MNIST example shares with examples/train_mnist
(examples/example_flags.cc), their checks, and the optimizer they describe."""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import kvtrain as kt  # noqa: E402


def parser(description):
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--network", default="mlp", choices=["mlp", "lenet"],
                   help="mlp (784-128-64-10, ReLU) or lenet")
    p.add_argument("--kv-store", default="local",
                   help="local, device, dist_sync, dist_device_sync, dist_async, dist_ssp or "
                        "dist_allreduce")
    p.add_argument("--batch-size", type=int, default=100, help="examples per batch (per worker)")
    p.add_argument("--num-epochs", type=int, default=10)
    p.add_argument("--epoch-size", type=int, default=0,
                   help="batches per epoch per worker (0: this worker's part of the data)")
    p.add_argument("--model-prefix", default="", help="checkpoint prefix")
    p.add_argument("--load-epoch", type=int, default=0,
                   help="resume from the checkpoint of this epoch")
    p.add_argument("--data-dir", default=kt.io.DEFAULT_MNIST_DIR)
    p.add_argument("--num-examples", type=int, default=0,
                   help="use only the first N training examples (0: all)")
    p.add_argument("--disp-batches", type=int, default=100, help="speedometer period (0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--optimizer", default="sgd", choices=list(kt.optimizer.NAMES))
    p.add_argument("--lr", type=float, default=0.05, help="learning rate")
    p.add_argument("--momentum", type=float, default=0.9, help="momentum (sgd, nag)")
    p.add_argument("--wd", type=float, default=0.0001, help="weight decay")
    p.add_argument("--lr-factor", type=float, default=0.2,
                   help="multiply the learning rate by this ...")
    p.add_argument("--lr-step-epochs", default="6,8", help="... after these epochs (empty: never)")
    p.add_argument("--gc-type", default="none", choices=["none", "2bit", "1bit", "fp16"],
                   help="gradient compression of dist stores (docs/kvstore.md)")
    p.add_argument("--gc-threshold", default="0.5",
                   help="the 2bit compression threshold (> 0), or auto (each array its own)")
    p.add_argument("--staleness", type=int, default=-1,
                   help="dist_async/dist_ssp: no worker runs more than this many steps ahead "
                        "of the slowest (-1: the store's default: 2 for dist_ssp, unbounded "
                        "for dist_async)")
    p.add_argument("--async-lr", default="constant", choices=["constant", "staleness"],
                   help="dist_async/dist_ssp: staleness divides each push's step, lr / (1 - "
                        "momentum), by 1 + the updates its weights missed")
    p.add_argument("--gc-min-bytes", type=int, default=0,
                   help="arrays of fewer bytes travel uncompressed (0: none)")
    p.add_argument("--gc-pull", default="", choices=["", "float32", "fp16"],
                   help="what push-pulls of compressed arrays bring back (default: fp16 "
                        "for fp16, float32 otherwise)")
    return p


def set_compression(args, kv):
    """--gc-type/--gc-threshold/--gc-min-bytes/--gc-pull on the store (dist
    stores only; a --gc-pull without a --gc-type is the store's error)."""
    if args.gc_type != "none" or args.gc_pull:
        kv.set_gradient_compression({"type": args.gc_type, "threshold": args.gc_threshold,
                                     "min_bytes": args.gc_min_bytes, "pull": args.gc_pull})


def set_async(args, kv):
    """--staleness/--async-lr on the store, where given."""
    if args.staleness >= 0 or args.async_lr != "constant":
        kv.set_async_options(staleness=args.staleness if args.staleness >= 0 else None,
                             lr=args.async_lr)


def parse(p, argv=None):
    args = p.parse_args(argv)
    if args.batch_size < 1:
        p.error("--batch-size=%d: expected a positive number of examples" % args.batch_size)
    if args.load_epoch > 0 and not args.model_prefix:
        p.error("--load-epoch needs --model-prefix")
    if args.num_epochs < args.load_epoch:
        p.error("--num-epochs is below --load-epoch")
    return args


def optimizer_params(args, kv, batches):
    """The optimizer's parameters; `batches` per epoch per worker."""
    params = {"learning_rate": args.lr, "wd": args.wd}
    if args.optimizer in ("sgd", "nag"):
        params["momentum"] = args.momentum
    if args.lr_step_epochs and args.lr_factor != 1.0:
        # The schedule counts updates: asynchronous stores make one per
        # worker's batch.
        updates = batches * (kv.num_workers if kv.type in ("dist_async", "dist_ssp") else 1)
        steps = [int(e) * updates for e in args.lr_step_epochs.split(",")]
        params["lr_scheduler"] = kt.lr_scheduler.MultiFactorScheduler(steps, args.lr_factor)
    return params
