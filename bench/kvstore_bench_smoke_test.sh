#!/usr/bin/env bash
# kvstore_bench runs end to end with tiny sizes and prints its summary line.
set -euo pipefail
bin="$(dirname "$0")/kvstore_bench"
[ -x "$bin" ] || bin="bench/kvstore_bench"
out=$("$bin" --keys=6 --min_bytes=64 --max_bytes=65536 --steps=2 2>&1)
echo "$out"
grep -q "^dist_sync .* ms .* ms .*x" <<< "$out" || { echo "no dist_sync row"; exit 1; }
grep -q "^dist_async .* ms .* ms .*x" <<< "$out" || { echo "no dist_async row"; exit 1; }
tail -n 1 <<< "$out" | grep -q "^kvstore_bench: push+pull step vs transport: dist_sync .* x, dist_async .* x$" \
  || { echo "bad summary line"; exit 1; }
