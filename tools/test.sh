#!/usr/bin/env bash
# Sets up the machine, builds everything and runs every test (`bazel test
# //...`: unit, multi-process and end-to-end tests alike). Ends with the line
# `N passed, N failed` (test cases; skipped ones are listed separately) and
# exits non-zero if anything failed. Extra arguments go to `bazel test`.
set -uo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh || exit 1

bep=$(mktemp /tmp/kvtrain-bep.XXXXXX.json)
trap 'rm -f "$bep"' EXIT
bazel test //... --keep_going --build_event_json_file="$bep" "$@"
bazel_rc=$?

echo
python3 tools/test_summary.py --bep "$bep"
summary_rc=$?
if [ $bazel_rc -ne 0 ] || [ $summary_rc -ne 0 ]; then
  exit 1
fi
