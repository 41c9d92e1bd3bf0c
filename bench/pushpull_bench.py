#!/usr/bin/env python3
"""pushpull_bench.py: the Python front-end's kv.pushpull, timed as
bench/pushpull_bench.cc times KVStore::PushPull (same flags, same output
lines), for bench/python_bench.py. Run with /usr/bin/python3."""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import numpy as np  # noqa: E402

import kvtrain as kt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kv_store", "--kv-store", default="local")
    ap.add_argument("--sizes", default="1024,1048576")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    kv = kt.kv.create(a.kv_store)
    for key, size in enumerate(int(s) for s in a.sizes.split(",")):
        value = np.zeros(size // 4, np.float32)
        out = np.zeros(size // 4, np.float32)
        kv.init(key, value)
        for _ in range(10):
            kv.pushpull(key, value, out=out)
        us = []
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            for _ in range(a.iters):
                kv.pushpull(key, value, out=out)
            us.append((time.perf_counter() - t0) * 1e6 / a.iters)
        print("pushpull bytes=%d us=%.2f" % (size, sorted(us)[len(us) // 2]), flush=True)


if __name__ == "__main__":
    main()
