#!/usr/bin/env bash
# allreduce_bench runs its kvtrain side end to end with tiny sizes.
set -euo pipefail
bin="$(dirname "$0")/allreduce_bench"
[ -x "$bin" ] || bin="bench/allreduce_bench"
out=$("$bin" --ranks=2,3 --min_bytes=1024 --max_bytes=65536 --seconds=0.01 --torch=false \
      --mlp=false 2>&1)
echo "$out"
grep -q "^2 processes" <<< "$out" || { echo "no 2-process table"; exit 1; }
grep -q "^3 processes" <<< "$out" || { echo "no 3-process table"; exit 1; }
grep -q "^ *64 KB " <<< "$out" || { echo "no 64 KB row"; exit 1; }
# Every row has the default-security (job key) column measured.
grep -Eq "^ *64 KB +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x" <<< "$out" ||
  { echo "no default-security column"; exit 1; }
tail -n 1 <<< "$out" | grep -q "^allreduce_bench: done" || { echo "bad last line"; exit 1; }
