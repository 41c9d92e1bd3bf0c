#!/usr/bin/env bash
# torch_ps_bench runs every row end to end with tiny sizes: PyTorch alone,
# DDP over gloo, kvtrain dist_sync and dist_allreduce, each with a measured
# rate and its ratio to DDP.
set -euo pipefail
here="$(dirname "$0")"
out=$(/usr/bin/python3 "$here/torch_ps_bench.py" --runs 1 --epochs 2 --num-examples 1000 \
      --nets mlp --security default 2>&1)
echo "$out"
for row in "PyTorch, 1 process" "DDP gloo 2 processes" "kvtrain dist_sync 2w2s default" \
           "kvtrain dist_allreduce 2w default"; do
  grep -Eq "^$row *\| *[0-9]+ *\| *[0-9.]+x" <<< "$out" ||
    { echo "no measured row for '$row'"; exit 1; }
done
