#!/usr/bin/env bash
# scale_bench with tiny jobs (4 and 8 nodes, a short idle spell): both sizes
# start, run, end cleanly and lose a killed worker; every figure has its
# row with a ratio to the first size, and every target its line.
set -euo pipefail
out=$(/usr/bin/python3 bench/scale_bench.py --node bench/scale_node --launch tracker/launch.py \
      --sizes 4,8 --rounds 2 --barriers 3 --idle 1 --timeout 120 2>&1) || {
  echo "scale_bench failed:"; echo "$out"; exit 1; }
echo "$out"
fail() { echo "FAILED: $*"; exit 1; }
cell=" \| [0-9.]+ \([0-9.]+x\) +"
grep -Eq "^4 \(1\+3\) +($cell){8}$" <<< "$out" || fail "no 4-node row"
grep -Eq "^8 \(2\+6\) +($cell){8}$" <<< "$out" || fail "no 8-node row"
grep -Eq "^  8 nodes: slowest worker's round [0-9.]+ ms; .* the idle job's CPU [0-9.]+ cores; .* kill of worker 3 to launch.py's exit [0-9.]+ s$" \
  <<< "$out" || fail "no 'also measured' line for 8 nodes"
for target in "1,024 nodes start in under 60 s: not measured" \
              "start-up grows no faster than linearly from 64 to 1,024 nodes: not measured" \
              "a barrier at 1,024 nodes under 50 ms: not measured" \
              "heartbeat work under 5% of a core at 1,024 nodes: not measured"; do
  grep -qF "$target" <<< "$out" || fail "no target line: $target"
done
grep -Eq "a dead node named within 5 s at every size: worst [0-9.]+ s: (met|missed) by" <<< "$out" ||
  fail "no dead-node target line"
[ "$(tail -n 1 <<< "$out")" = "scale_bench: 2 sizes measured" ] || fail "last line is not the summary"
echo PASSED
