#!/usr/bin/env bash
# Sets up the machine, builds everything and runs every test (`bazel test
# //...`: unit, multi-process and end-to-end tests alike). Ends with the line
# `N passed, N failed` (test cases; skipped ones are listed separately) and
# exits non-zero if anything failed. Before the build, tools/check_layers.py
# checks that no dependency points the wrong way between folders (one case).
# After it, tools/fuzz.sh runs every fuzz target for KVTRAIN_FUZZ_SECONDS
# (default 10; 0 skips fuzzing), each counted as one case. Extra arguments go
# to `bazel test`.
set -uo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh || exit 1

bep=$(mktemp /tmp/kvtrain-bep.XXXXXX.json)
fuzz=$(mktemp /tmp/kvtrain-fuzz.XXXXXX.txt)
checks=$(mktemp /tmp/kvtrain-checks.XXXXXX.txt)
trap 'rm -f "$bep" "$fuzz" "$checks"' EXIT

if python3 tools/check_layers.py; then
  echo "tools/check_layers.py PASSED" > "$checks"
else
  echo "tools/check_layers.py FAILED" > "$checks"
fi
bazel test //... --keep_going --build_event_json_file="$bep" "$@"
bazel_rc=$?

fuzz_args=()
if [ "${KVTRAIN_FUZZ_SECONDS:-10}" != "0" ]; then
  echo
  tools/fuzz.sh --results "$fuzz"
  fuzz_args=(--fuzz-results "$fuzz")
fi

echo
python3 tools/test_summary.py --bep "$bep" --check-results "$checks" \
  "${fuzz_args[@]}"
summary_rc=$?
if [ $bazel_rc -ne 0 ] || [ $summary_rc -ne 0 ]; then
  exit 1
fi
