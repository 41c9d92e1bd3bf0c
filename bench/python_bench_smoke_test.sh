#!/usr/bin/env bash
# python_bench runs every part end to end with tiny sizes: every row of the
# tables, each with a measured figure and its Python / C++ ratio.
set -euo pipefail
here="$(dirname "$0")"
bin="."
[ -x examples/train_mnist ] || bin="bazel-bin"
out=$(/usr/bin/python3 "$here/python_bench.py" --bin "$bin" --runs 1 --epochs 2 \
      --num-examples 1000 --iters 10 --parts train,pushpull,iter 2>&1)
echo "$out"
for row in "local " "dist_sync 2w2s" "local, 1 KB" "local, 1 MB" "dist_sync 1w1s, 1 KB" \
           "dist_sync 1w1s, 1 MB" "local, NDArrayIter vs PythonIter"; do
  grep -Eq "^$row.*\| *[0-9.]+ *\| *[0-9.]+ *\| *[0-9.]+x$" <<< "$out" ||
    { echo "no measured row for '$row'"; exit 1; }
done
