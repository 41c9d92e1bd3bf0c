#!/usr/bin/env bash
# ps_bench with tiny sizes and short rows: it runs both jobs, prints a row
# with a ratio for every size, the CURVE vs plain table, and ends with the
# one-line summary.
# Also the same-host (default settings on one host) vs plain TCP table.
set -euo pipefail
out=$(bench/ps_bench --sizes=4,1024,65536 --min_time=0.02 --reps=1 --in_flight=2 2>&1) || {
  echo "ps_bench failed:"; echo "$out"; exit 1; }
echo "$out"
fail() { echo "FAILED: $*"; exit 1; }
for job in 1w1s 2w2s; do
  for size in 4B 1KB 64KB; do
    for k in 1 2; do
      grep -Eq "^$job +$size +$k +[0-9.]+ (us|ms) +[0-9.]+ (us|ms) +[0-9.]+ +[0-9.]+$" <<< "$out" ||
        fail "no $job $size x$k row"
    done
  done
done
for job in 1w1s 2w2s; do
  for size in 4B 1KB 64KB; do
    grep -Eq "^$job +$size +1 +[0-9.]+ (us|ms) +[0-9.]+ (us|ms) +[0-9.]+ +[0-9.]+ +[0-9.]+$" <<< "$out" ||
      fail "no CURVE row for $job $size"
  done
done
same=$(sed -n '/^Default settings on one host/,$p' <<< "$out")
for job in 1w1s 2w2s; do
  grep -Eq "^$job +64KB +1 +[0-9.]+ (us|ms) +[0-9.]+ (us|ms) +[0-9.]+ +[0-9.]+ +[0-9.]+$" <<< "$same" ||
    fail "no same-host row for $job 64KB"
done
grep -q "1w1s 1KB push+pull .* x raw 64B round trip" <<< "$out" || fail "no 1KB line"
last=$(echo "$out" | tail -n 1)
[[ "$last" =~ ^ps_bench:\ 64KB\ push\+pull\ [0-9.]+\ (us|ms)\ =\ [0-9.]+\ x\ raw\ zmq\ echo$ ]] ||
  fail "last line is not the summary: $last"
echo PASSED
