#!/usr/bin/env bash
# dist_train_bench runs every row end to end with tiny sizes: default
# security and --insecure, the ratio columns and the comparison lines, and
# the compression table (2bit; 2bit with the weights pulled as halves; 2bit
# with the servers updating, where by default the workers do).
set -euo pipefail
here="$(dirname "$0")"
train="examples/train_mnist"
[ -x "$train" ] || train="bazel-bin/examples/train_mnist"
out=$(/usr/bin/python3 "$here/dist_train_bench.py" --train "$train" --launch tracker/launch.py \
      --nets mlp --runs 1 --epochs 2 --num-examples 2000 --timeout 120 \
      --gc none,2bit,2bit/fp16,2bit/servers 2>&1)
echo "$out"
for row in "local" "dist_sync 1w1s" "dist_sync 2w1s" "dist_sync 2w2s" "dist_sync 2w2s R=1" \
           "dist_sync 2w2s K=1" "dist_async 2w2s" "dist_ssp 2w2s" "dist_allreduce 2w"; do
  grep -q "^$row *|" <<< "$out" || { echo "no table row for $row"; exit 1; }
done
grep -q "default/insecure" <<< "$out" || { echo "no default/insecure column"; exit 1; }
grep -q "default: dist_sync 2w2s / dist_allreduce 2w = [0-9.]*x" <<< "$out" ||
  { echo "no dist_sync vs dist_allreduce line"; exit 1; }
grep -q "insecure: .*dist_async 2w2s / dist_sync 2w2s = [0-9.]*x" <<< "$out" ||
  { echo "no dist_async vs dist_sync line"; exit 1; }
grep -q "default: .*dist_ssp 2w2s / dist_sync 2w2s = [0-9.]*x" <<< "$out" ||
  { echo "no dist_ssp vs dist_sync line"; exit 1; }
grep -q "default: .*dist_sync 2w2s R=1 / dist_sync 2w2s = [0-9.]*x" <<< "$out" ||
  { echo "no server replicas vs none line"; exit 1; }
grep -q "default: .*dist_sync 2w2s K=1 / dist_sync 2w2s = [0-9.]*x" <<< "$out" ||
  { echo "no worker restarts vs none line"; exit 1; }
# Every figure is a measured rate, not a dash or zero.
if grep -E "^dist_sync 1w1s *\| *(-|0) " <<< "$out"; then echo "no rate measured"; exit 1; fi
grep -qE "^dist_sync 2w2s *\| *[0-9]+ +1.00x( \| *[0-9]+ +[0-9.]+x){3}$" \
  <<< "$out" ||
  { echo "no compression table row for dist_sync 2w2s"; exit 1; }
grep -qE "^  dist_sync 2w2s +per round vs none: 2bit [0-9.]+; 2bit/fp16 [0-9.]+; 2bit/servers [0-9.]+$" \
  <<< "$out" || { echo "no per-round ratios for dist_sync 2w2s"; exit 1; }
grep -q "2bit *: a worker pushes *61.2 KB and pulls *86.4 KB per step (dist_sync, levels" \
  <<< "$out" ||
  { echo "no wire bytes line for 2bit"; exit 1; }
grep -q "2bit/fp16 *: a worker pushes *61.2 KB and pulls *236.8 KB per step" <<< "$out" ||
  { echo "no wire bytes line for 2bit/fp16"; exit 1; }
grep -q "2bit/servers *: a worker pushes *61.2 KB and pulls *437.5 KB per step" <<< "$out" ||
  { echo "no wire bytes line for 2bit/servers"; exit 1; }
# Only dist_sync rows have a 2bit/servers rate (the others update there anyway).
grep -qE "^dist_async 2w2s *\| *[0-9]+ +1.00x \| *[0-9]+ +[0-9.]+x \| *[0-9]+ +[0-9.]+x \| *- +-$" \
  <<< "$out" || { echo "dist_async has a 2bit/servers rate"; exit 1; }
