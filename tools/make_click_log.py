#!/usr/bin/env python3
"""Writes a synthetic click log in LibSVM text format, for training models
over sparse embedding tables (engine/io/libsvm.h reads it).

Each line is one impression: `label id:1 id:1 ...`, label 1 for a click and
0 otherwise, one categorical feature per field. Field f's local ids 0..V-1
are drawn Zipf-distributed (a few ids are very frequent, most are rare; the
1-based rank is the floor of a draw from the density x**-s on [1, V + 1)) and
written as the global id

    id = f * 2**40 + local          (fields 0..F-1, local < V <= 2**40)

so fields never collide, field 0's ids are small and every other field's are
above 2**32. Which local id is field f's k-th most frequent is a fixed
permutation of the hidden model.

Labels come from a hidden model that --seed does not change (the other
options fix it), so a training and a test file share it: a bias, one weight
per (field, id) (a Gaussian derived from a hash of the model seed and the id,
so nothing is stored for large vocabularies) and, unless --interaction is 0
or there is one field, a factorised interaction between fields 0 and 1 (the
dot product of a hashed 4-dimensional vector of field 0's id and one of
field 1's id). A row's click probability is p = sigmoid(score) and its label
is a Bernoulli(p) draw.

At the end it prints, to stderr, each file's rows, positive rate and the AUC
and log-loss of the hidden model's own probabilities on its rows: the
Bayes-optimal figures, the best a trained model can expect.

The output is a function of the options alone, and the rows of a shorter
file are the first rows of a longer one with the same seeds. Python 3
standard library only.

  tools/make_click_log.py --rows 1000000 --out train.libsvm \\
      --test-rows 100000 --test-out test.libsvm
"""

import argparse
import math
import operator
import random
import sys
import time

FIELD_SHIFT = 40  # id = field << FIELD_SHIFT | local id
MAX_FIELDS = 1 << 16
INTERACTION_DIM = 4
CHUNK_ROWS = 1 << 14  # rows generated and written at a time
MASK64 = (1 << 64) - 1


def mix64(x):
    """SplitMix64's finaliser: a well-mixed 64-bit hash of a 64-bit integer."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def gaussian(h):
    """A standard normal value from a 64-bit hash (Box-Muller on two
    24-bit uniforms)."""
    u1 = ((h >> 40) + 1) / float(1 << 24)  # (0, 1]: log(u1) is finite
    u2 = (h & 0xFFFFFF) / float(1 << 24)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


class HiddenModel:
    """The model that labels the rows: fixed by its seed and the options."""

    def __init__(self, args):
        self.bias = args.bias
        self.weight_scale = args.weight_scale
        self.vocab = args.vocab
        self.fields = args.fields
        # Salts keep the hashes of weights, interaction vectors and id
        # permutations independent of each other.
        seed = args.model_seed & MASK64
        self.salt = [mix64(mix64(seed) + tag) for tag in range(2 + 2 * INTERACTION_DIM)]
        # Component scale so that the interaction's standard deviation over
        # random ids is args.interaction.
        self.vec_scale = math.sqrt(args.interaction / math.sqrt(INTERACTION_DIM))
        self.interact = args.interaction > 0 and args.fields >= 2
        # Rank r of field f is local id (r * mult[f] + add[f]) mod V, a
        # bijection because gcd(mult[f], V) == 1.
        self.mult, self.add = [], []
        for f in range(args.fields):
            h = mix64(self.salt[0] ^ f)
            mult = (h % args.vocab) | 1
            while math.gcd(mult, args.vocab) != 1:
                mult += 2
            self.mult.append(mult)
            self.add.append((h >> 32) % args.vocab)
        # Zipf exponent s: rank = floor(x) - 1 with x drawn from the density
        # proportional to x**-s on [1, V + 1), by inverting its CDF.
        s = args.zipf
        if abs(s - 1.0) < 1e-12:
            self.zipf_log = math.log(args.vocab + 1.0)
        else:
            self.zipf_log = None
            self.zipf_a = (args.vocab + 1.0) ** (1.0 - s) - 1.0
            self.zipf_e = 1.0 / (1.0 - s)
        # Global id -> (weight, "id:1" token), filled as ids are drawn.
        self.cache = {}
        self.vectors = ({}, {})  # interaction vectors of fields 0 and 1

    def ranks(self, us):
        """Zipf-distributed ranks (0 the most frequent) from uniforms in [0, 1)."""
        if self.zipf_log is not None:
            c, exp = self.zipf_log, math.exp
            ranks = [int(exp(c * u)) - 1 for u in us]
        else:
            a, e = self.zipf_a, self.zipf_e
            ranks = [int((1.0 + a * u) ** e) - 1 for u in us]
        last = self.vocab - 1
        if ranks and max(ranks) > last:  # rounding at u close to 1
            ranks = [min(r, last) for r in ranks]
        return ranks

    def feature(self, gid):
        """(weight, token) of global id `gid`."""
        entry = self.cache.get(gid)
        if entry is None:
            w = self.weight_scale * gaussian(mix64(gid ^ self.salt[1]))
            entry = (w, "%d:1" % gid)
            self.cache[gid] = entry
        return entry

    def vector(self, side, gid):
        """Field 0's (side 0) or field 1's (side 1) interaction vector of `gid`."""
        vec = self.vectors[side].get(gid)
        if vec is None:
            base = 2 + side * INTERACTION_DIM
            vec = [self.vec_scale * gaussian(mix64(gid ^ self.salt[base + j]))
                   for j in range(INTERACTION_DIM)]
            self.vectors[side][gid] = vec
        return vec


def write_log(model, rows, rng, path):
    """Writes `rows` rows to `path`; returns (labels, probabilities)."""
    fields = model.fields
    stride = fields + 1  # uniforms per row: one per field, one for the label
    labels, probs = [], []
    with open(path, "w", encoding="ascii") as out:
        for start in range(0, rows, CHUNK_ROWS):
            n = min(CHUNK_ROWS, rows - start)
            us = [rng.random() for _ in range(n * stride)]
            columns = []
            for f in range(fields):
                mult, add, base = model.mult[f], model.add[f], f << FIELD_SHIFT
                v = model.vocab
                columns.append([base + (r * mult + add) % v
                                for r in model.ranks(us[f::stride])])
            # Column by column: list comprehensions are Python's fast loops.
            get, feature = model.cache.get, model.feature
            feats = [[get(g) or feature(g) for g in col] for col in columns]
            scores = [model.bias] * n
            for col in feats:
                scores = [s + e[0] for s, e in zip(scores, col)]
            if model.interact:
                vec = model.vector
                scores = [s + sum(map(operator.mul, vec(0, g0), vec(1, g1)))
                          for s, g0, g1 in zip(scores, columns[0], columns[1])]
            exp = math.exp
            ps = [1.0 / (1.0 + exp(-s)) for s in scores]
            ys = [1 if u < p else 0 for u, p in zip(us[fields::stride], ps)]
            labels.extend(ys)
            probs.extend(ps)
            lines = ["%d %s\n" % (y, " ".join([e[1] for e in row]))
                     for y, row in zip(ys, zip(*feats))]
            out.write("".join(lines))
    return labels, probs


def auc(labels, scores):
    """Exact ROC AUC: the Mann-Whitney statistic, tied scores at their
    average rank. NaN when only one class is present."""
    order = sorted(range(len(scores)), key=scores.__getitem__)
    pos = sum(labels)
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    rank_sum = 0.0
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        avg_rank = (i + j) / 2.0 + 1.0  # ranks are 1-based
        rank_sum += avg_rank * sum(labels[order[k]] for k in range(i, j + 1))
        i = j + 1
    return (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg)


def log_loss(labels, probs):
    eps = 1e-12
    total = 0.0
    for y, p in zip(labels, probs):
        p = min(max(p, eps), 1.0 - eps)
        total -= math.log(p) if y else math.log(1.0 - p)
    return total / len(labels) if labels else float("nan")


def report(path, labels, probs, seconds):
    rows = len(labels)
    rate = sum(labels) / rows if rows else float("nan")
    print("make_click_log: %s: %d rows in %.1f s, positive rate %.4f; hidden "
          "model (the best a model can expect): AUC %.4f, log-loss %.4f"
          % (path, rows, seconds, rate, auc(labels, probs), log_loss(labels, probs)),
          file=sys.stderr)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="make_click_log.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, required=True, help="rows of the training file")
    p.add_argument("--out", required=True, help="path of the training file")
    p.add_argument("--test-rows", type=int, default=0,
                   help="rows of a held-out file from the same hidden model and "
                        "its own stream of draws (default 0: none)")
    p.add_argument("--test-out", help="path of the held-out file (with --test-rows)")
    p.add_argument("--fields", type=int, default=8,
                   help="categorical fields per row (default %(default)s)")
    p.add_argument("--vocab", type=int, default=100000,
                   help="ids per field, at most 2**40 (default %(default)s)")
    p.add_argument("--zipf", type=float, default=1.1,
                   help="Zipf exponent of the ids' distribution, 0 for uniform "
                        "(default %(default)s)")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the rows drawn (default %(default)s)")
    p.add_argument("--model-seed", type=int, default=0,
                   help="seed of the hidden model (default %(default)s)")
    p.add_argument("--bias", type=float, default=-1.5,
                   help="the hidden model's bias (default %(default)s)")
    p.add_argument("--weight-scale", type=float, default=0.5,
                   help="standard deviation of the hidden per-id weights "
                        "(default %(default)s)")
    p.add_argument("--interaction", type=float, default=0.5,
                   help="standard deviation of the field 0 x field 1 interaction, "
                        "0 for none (default %(default)s)")
    args = p.parse_args(argv)
    if args.rows < 0 or args.test_rows < 0:
        p.error("--rows and --test-rows must be >= 0")
    if not 1 <= args.fields <= MAX_FIELDS:
        p.error("--fields must be in [1, %d], got %d" % (MAX_FIELDS, args.fields))
    if not 1 <= args.vocab <= 1 << FIELD_SHIFT:
        p.error("--vocab must be in [1, 2**%d], got %d" % (FIELD_SHIFT, args.vocab))
    if not (args.zipf >= 0 and math.isfinite(args.zipf)):
        p.error("--zipf must be a finite number >= 0, got %s" % args.zipf)
    if args.weight_scale < 0 or args.interaction < 0:
        p.error("--weight-scale and --interaction must be >= 0")
    if (args.test_rows > 0) != (args.test_out is not None):
        p.error("--test-rows and --test-out go together")
    return args


def main(argv):
    args = parse_args(argv)
    model = HiddenModel(args)
    outputs = [(args.out, args.rows, random.Random(args.seed))]
    if args.test_out is not None:
        # A stream of its own: the held-out rows do not depend on --rows.
        outputs.append((args.test_out, args.test_rows,
                        random.Random("test:%d" % args.seed)))
    for path, rows, rng in outputs:
        start = time.monotonic()
        try:
            labels, probs = write_log(model, rows, rng, path)
        except OSError as e:
            raise SystemExit("make_click_log: %s: %s" % (path, e.strerror))
        report(path, labels, probs, time.monotonic() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
