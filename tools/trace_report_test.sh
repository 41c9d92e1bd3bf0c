#!/usr/bin/env bash
# KVTRAIN_TRACE end to end: a dist_sync job (1 worker, 1 server, under
# tracker/launch.py) writes one trace per process; tools/trace_report.py
# merges them into one valid Chrome trace and prints the step breakdown with
# every stage of the worker's requests measured on both processes.
set -euo pipefail
dir="${TEST_TMPDIR:-$(mktemp -d)}/trace"
mkdir -p "$dir"
train="examples/train_mnist"
[ -x "$train" ] || train="bazel-bin/examples/train_mnist"
/usr/bin/python3 tracker/launch.py -n 1 -s 1 --launcher local --env "KVTRAIN_TRACE=$dir/job" \
  "$train" --kv-store dist_sync --num-epochs 1 --num-examples 3000 --disp-batches 0 >"$dir/out" 2>&1 ||
  { cat "$dir/out"; echo "FAILED: the job failed"; exit 1; }
fail() { echo "FAILED: $*"; exit 1; }
n=$(ls "$dir"/job.*.json | wc -l)
[ "$n" = 3 ] || fail "expected 3 trace files (scheduler, server, worker), got $n"
out=$(/usr/bin/python3 tools/trace_report.py "$dir/job" --out "$dir/merged.json")
echo "$out"
/usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); \
names={e['args']['name'] for e in d['traceEvents'] if e['ph']=='M'}; \
assert names=={'scheduler 0','server 0','worker 0'}, names" "$dir/merged.json" ||
  fail "the merged trace does not name the three processes"
grep -Eq "^worker 0: [0-9]+ steps" <<< "$out" || fail "no step count"
for stage in "step" "compute \(forward \+ backward ops\)" "after backward \(not hidden\)" \
             "bucket of [0-9]+: to server" "bucket of [0-9]+: server" "bucket of [0-9]+: back" \
             "bucket of [0-9]+: round trip"; do
  grep -Eq "^  $stage +[0-9]+ +[0-9]+ +[0-9]+$" <<< "$out" || fail "no figures for: $stage"
done
# Without KVTRAIN_TRACE nothing is written.
rm -f "$dir"/job.*.json
"$train" --num-epochs 1 --num-examples 500 --disp-batches 0 >/dev/null 2>&1
[ -z "$(ls "$dir" | grep '^job\.' || true)" ] || fail "a trace was written without KVTRAIN_TRACE"
echo PASSED
