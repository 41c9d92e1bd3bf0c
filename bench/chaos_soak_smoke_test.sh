#!/usr/bin/env bash
# chaos_soak with tiny sizes: workers and a server killed while a job
# trains, which ends with the baseline's weights and optimizer states.
set -euo pipefail
here="$(dirname "$0")"
train="examples/train_mnist"
[ -x "$train" ] || train="bazel-bin/examples/train_mnist"
out=$(/usr/bin/python3 "$here/chaos_soak.py" --train "$train" --launch tracker/launch.py \
      --epochs 6 --num-examples 8000 --every 1.5 --seed 3 2>&1) || { echo "$out"; exit 1; }
echo "$out"
grep -qE "^chaos: .* [0-9]+ kills" <<< "$out" || { echo "no summary line"; exit 1; }
kills=$(grep -oE "[0-9]+ kills" <<< "$out" | grep -oE "^[0-9]+")
[ "$kills" -ge 2 ] || { echo "only $kills kills"; exit 1; }
grep -q "byte-identical to the baseline's: yes" <<< "$out" || { echo "the result differs"; exit 1; }
