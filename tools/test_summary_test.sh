#!/usr/bin/env bash
# tools/test_summary.py counts cases from test.xml files, treats unbuilt and
# crashed targets as failures, lists skips apart, and ends with the CI line.
set -euo pipefail
summary="$(dirname "$0")/test_summary.py"
[ -f "$summary" ] || summary="tools/test_summary.py"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

cat > "$dir/a.xml" <<'XML'
<testsuites><testsuite name="A">
<testcase name="one" status="run" result="completed" classname="A"/>
<testcase name="two" status="run" result="completed" classname="A"/>
<testcase name="gpu" status="run" result="skipped" classname="A"><skipped/></testcase>
</testsuite></testsuites>
XML
cat > "$dir/b.xml" <<'XML'
<testsuites><testsuite name="B">
<testcase name="ok" status="run" result="completed" classname="B"/>
<testcase name="bad" status="run" result="completed" classname="B"><failure message="x"/></testcase>
</testsuite></testsuites>
XML
cat > "$dir/c.xml" <<'XML'
<testsuites><testsuite name="C">
<testcase name="ok" status="run" result="completed" classname="C"/>
</testsuite></testsuites>
XML

conf='"configured":{"targetKind":"cc_test rule","testSize":"MEDIUM"}'
{
  for t in a b c d e; do
    echo "{\"id\":{\"targetConfigured\":{\"label\":\"//x:$t\"}},$conf}"
  done
  echo '{"id":{"testResult":{"label":"//x:a"}},"testResult":{"testActionOutput":[{"name":"test.xml","uri":"file://'"$dir"'/a.xml"}]}}'
  echo '{"id":{"testSummary":{"label":"//x:a"}},"testSummary":{"overallStatus":"PASSED"}}'
  echo '{"id":{"testResult":{"label":"//x:b"}},"testResult":{"testActionOutput":[{"name":"test.xml","uri":"file://'"$dir"'/b.xml"}]}}'
  echo '{"id":{"testSummary":{"label":"//x:b"}},"testSummary":{"overallStatus":"FAILED"}}'
  # c: every case passed but the process crashed afterwards.
  echo '{"id":{"testResult":{"label":"//x:c"}},"testResult":{"testActionOutput":[{"name":"test.xml","uri":"file://'"$dir"'/c.xml"}]}}'
  echo '{"id":{"testSummary":{"label":"//x:c"}},"testSummary":{"overallStatus":"FAILED"}}'
  # d: failed to build; e: a plain passing target without cases.
  echo '{"id":{"targetCompleted":{"label":"//x:d"}},"aborted":{"reason":"ANALYSIS_FAILURE"}}'
  echo '{"id":{"testSummary":{"label":"//x:e"}},"testSummary":{"overallStatus":"PASSED"}}'
} > "$dir/bep.json"

set +e
out=$(python3 "$summary" --bep "$dir/bep.json")
rc=$?
set -e
echo "$out"
last=$(echo "$out" | tail -n 1)
# a: 2 passed, 1 skipped; b: 1 passed, 1 failed; c: 1 passed + the crash;
# d: failed to build; e: 1 passed.
[ "$last" = "5 passed, 3 failed" ] || { echo "wrong closing line: $last"; exit 1; }
[ $rc -eq 1 ] || { echo "expected exit 1, got $rc"; exit 1; }
grep -q "1 skipped (reported, not counted as passed)" <<< "$out" || { echo "skip not reported"; exit 1; }
grep -q "FAILED //x:d" <<< "$out" || { echo "unbuilt target not named"; exit 1; }

# All green: exit 0.
grep -v '//x:[bcd]' "$dir/bep.json" > "$dir/ok.json"
python3 "$summary" --bep "$dir/ok.json" | tail -n 1 | grep -qx "3 passed, 0 failed"

# Fuzz targets from tools/fuzz.sh --results: one case each.
printf '//p:a_fuzzer PASSED\n//p:b_fuzzer FAILED\n' > "$dir/fuzz.txt"
set +e
out=$(python3 "$summary" --bep "$dir/ok.json" --fuzz-results "$dir/fuzz.txt")
rc=$?
set -e
[ "$(echo "$out" | tail -n 1)" = "4 passed, 1 failed" ] || { echo "fuzz not counted: $out"; exit 1; }
[ $rc -eq 1 ] || { echo "expected exit 1 with a failed fuzz target"; exit 1; }
grep -q "FAILED //p:b_fuzzer: fuzzing failed" <<< "$out" || { echo "fuzz failure not named"; exit 1; }
# Check scripts from tools/test.sh: one case each, counted with the rest.
echo 'tools/check_layers.py FAILED' > "$dir/checks.txt"
set +e
out=$(python3 "$summary" --bep "$dir/ok.json" --check-results "$dir/checks.txt" --fuzz-results "$dir/fuzz.txt")
rc=$?
set -e
[ "$(echo "$out" | tail -n 1)" = "4 passed, 2 failed" ] || { echo "check not counted: $out"; exit 1; }
grep -q "FAILED tools/check_layers.py: check failed" <<< "$out" || { echo "check failure not named"; exit 1; }
# Fuzz results do not hide a `bazel test` that ran nothing.
echo '{"id":{"started":{}}}' > "$dir/empty.json"
set +e
out=$(python3 "$summary" --bep "$dir/empty.json" --fuzz-results "$dir/fuzz.txt")
set -e
grep -q "no test targets were found" <<< "$out" || { echo "empty run not reported: $out"; exit 1; }
echo "test_summary_test: ok"
