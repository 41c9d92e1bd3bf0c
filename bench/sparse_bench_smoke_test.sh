#!/usr/bin/env bash
# sparse_bench runs end to end with tiny sizes and prints every table.
set -euo pipefail
bin="$(dirname "$0")/sparse_bench"
[ -x "$bin" ] || bin="bench/sparse_bench"
out=$("$bin" --rows=64 --pool=1000 --steps=2 --table_rows=1000,100000 --dense_rows=1000 \
      --batch=16 --fields=4 2>&1)
echo "$out"
grep -q "baseline / kvtrain = [0-9.]*" <<< "$out" || { echo "no row-path ratio"; exit 1; }
[ "$(grep -c "of the first)" <<< "$out")" = 2 ] || { echo "no scale rows"; exit 1; }
grep -q "1000 rows: .* samples/s" <<< "$out" || { echo "no dense baseline"; exit 1; }
