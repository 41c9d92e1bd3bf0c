#!/usr/bin/env bash
# Builds every fuzz target (kv_fuzz_target in tools/fuzz.bzl) with clang,
# libFuzzer and AddressSanitizer, and runs each for KVTRAIN_FUZZ_SECONDS
# (default 10) from its checked-in corpus (fuzz_corpus/<name>/ beside the
# code). Clang builds live in their own Bazel output base, so the gcc build
# of `bazel test //...` is not redone. A crash leaves its input in
# $KVTRAIN_FUZZ_ARTIFACTS (default /tmp/kvtrain-fuzz-artifacts): fix the
# decoder and add the input to the target's corpus as a regression.
#
# Usage: tools/fuzz.sh [--results FILE] [target...]   (default: all targets)
# --results FILE gets one line per target, `<label> PASSED|FAILED`, which
# tools/test_summary.py --fuzz-results counts.
set -uo pipefail
cd "$(dirname "$0")/.."

results=""
if [ "${1:-}" = "--results" ]; then
  results=$2
  shift 2
fi
seconds=${KVTRAIN_FUZZ_SECONDS:-10}
artifacts=${KVTRAIN_FUZZ_ARTIFACTS:-/tmp/kvtrain-fuzz-artifacts}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(//transport/ps:message_fuzzer //transport/ps:control_fuzzer
           //transport/collective:mesh_fuzzer //transport/collective:rendezvous_fuzzer
           //trainer:checkpoint_fuzzer //engine:symbol_fuzzer
           //engine/io:idx_fuzzer)
fi
if ! command -v clang >/dev/null; then
  echo "fuzz: error: clang is missing (tools/setup.sh installs it)" >&2
  exit 1
fi

# One output base per checkout, beside Bazel's default ones.
output_base="${HOME}/.cache/bazel/kvtrain-fuzz-$(pwd | md5sum | cut -c1-12)"
# --symlink_prefix=/: no bazel-* links in the checkout (they would point into
# this output base, and `bazel test //...` would then wander into them).
bazel_fuzz() {
  bazel --output_base="$output_base" "$@" --config=fuzz --repo_env=CC=clang \
      --define=cuda=false --symlink_prefix=/
}
[ -n "$results" ] && : > "$results"
if ! bazel_fuzz build "${targets[@]}"; then
  echo "fuzz: error: building the fuzz targets failed" >&2
  [ -n "$results" ] && for t in "${targets[@]}"; do echo "$t FAILED" >> "$results"; done
  exit 1
fi
bin=$(bazel_fuzz info bazel-bin 2>/dev/null)
bazel --output_base="$output_base" shutdown

mkdir -p "$artifacts"
failed=0
for t in "${targets[@]}"; do
  pkg=${t#//}; pkg=${pkg%%:*}; name=${t##*:}
  corpus="$pkg/fuzz_corpus/${name%er}"
  work=$(mktemp -d /tmp/kvtrain-fuzz-corpus.XXXXXX)
  log="$artifacts/${name}.log"
  echo "fuzz: $t for ${seconds} s (corpus $corpus)"
  # New inputs go to a scratch directory; the checked-in corpus is read only.
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
    "$bin/$pkg/$name" -max_total_time="$seconds" -max_len=4096 -timeout=20 \
      -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$artifacts/${name}-" "$work" "$corpus" > "$log" 2>&1
  rc=$?
  rm -rf "$work"
  # -a: a target's log may hold raw bytes of the inputs it logged.
  runs=$(grep -a -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1)
  if [ $rc -eq 0 ]; then
    echo "fuzz: $t PASSED (${runs:-?} inputs in ${seconds} s)"
    [ -n "$results" ] && echo "$t PASSED" >> "$results"
  else
    failed=1
    echo "fuzz: $t FAILED (exit $rc); the input is under $artifacts, the log:"
    grep -a -E 'ERROR|SUMMARY|Check failed|Test unit written|#0 |#1 |#2 |#3 ' "$log" | head -20
    [ -n "$results" ] && echo "$t FAILED" >> "$results"
  fi
done
exit $failed
