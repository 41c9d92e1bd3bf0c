#!/usr/bin/env bash
# mxnet_face_bench end to end with tiny sizes: both rows measured, with the
# face / kvtrain ratio and both accuracies.
set -euo pipefail
here="$(dirname "$0")"
out=$(/usr/bin/python3 "$here/mxnet_face_bench.py" --runs 1 --epochs 2 --num-examples 2000 2>&1)
echo "$out"
for row in "mlp local " "mlp dist_sync 2w2s"; do
  grep -Eq "^$row.*\| *[0-9]+ *\| *[0-9]+ *\| *[0-9.]+x \| 0\.[0-9]+, 0\.[0-9]+$" <<< "$out" ||
    { echo "no measured row for '$row'"; exit 1; }
done
