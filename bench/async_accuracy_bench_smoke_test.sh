#!/usr/bin/env bash
# async_accuracy_bench end to end with tiny sizes: a row and its baseline,
# each row's accuracy, mean, rate and difference to the baseline.
set -euo pipefail
here="$(dirname "$0")"
train="examples/train_mnist"
[ -x "$train" ] || train="bazel-bin/examples/train_mnist"
out=$(/usr/bin/python3 "$here/async_accuracy_bench.py" --train "$train" --launch tracker/launch.py \
      --seeds 0 --epochs 2 --num-examples 2000 --timeout 120 \
      --rows "dist_async 2w2s staleness-lr,dist_sync 2bit auto" 2>&1)
echo "$out"
for row in "local" "dist_sync 2w2s" "dist_async 2w2s staleness-lr" "dist_sync 2bit auto"; do
  grep -qE "^$row +\| [0-9.]+ \| mean [0-9.]+ \| +[0-9]+ samples/s \|" <<< "$out" ||
    { echo "no row for $row"; exit 1; }
done
grep -qE "^dist_async 2w2s staleness-lr .*\| [-+][0-9.]+ vs local$" <<< "$out" ||
  { echo "no difference to local"; exit 1; }
grep -qE "^dist_sync 2bit auto .*\| [-+][0-9.]+ vs dist_sync 2w2s$" <<< "$out" ||
  { echo "no difference to dist_sync"; exit 1; }
if /usr/bin/python3 "$here/async_accuracy_bench.py" --train "$train" --rows nope 2>/dev/null; then
  echo "an unknown row was accepted"; exit 1
fi
