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
# Two workers' traces, made up: worker 1's backward pass ends 10*k us after
# worker 0's in step k; with the first fifth of 10 steps skipped, the
# spreads are 20..90 us (median 55, p90 and max 90).
/usr/bin/python3 - "$dir/two" <<'PY'
import json, sys
for w in (0, 1):
    ev = [{"ph": "M", "pid": 100 + w, "tid": 0, "name": "process_name",
           "args": {"name": "worker %d" % w}}]
    for k in range(11):
        ev.append({"ph": "X", "cat": "engine", "name": "fc1 forward", "ts": 1000 * k,
                   "dur": 100, "pid": 100 + w, "tid": 1})
        ev.append({"ph": "i", "cat": "engine", "name": "backward pass",
                   "ts": 1000 * k + 500 + 10 * k * w, "pid": 100 + w, "tid": 1})
    json.dump({"traceEvents": ev}, open("%s.%d.json" % (sys.argv[1], 100 + w), "w"))
PY
two=$(/usr/bin/python3 tools/trace_report.py "$dir/two")
echo "$two"
grep -Eq "^workers: 8 steps each" <<< "$two" || fail "no workers' step count"
grep -Eq "^  backward ends apart \(first to last\) +55 +90 +90$" <<< "$two" ||
  fail "wrong spread of the workers' backward ends"
# One worker: no spread line.
! grep -q "backward ends apart" <<< "$out" || fail "a spread line for one worker"
# Without KVTRAIN_TRACE nothing is written.
rm -f "$dir"/job.*.json
"$train" --num-epochs 1 --num-examples 500 --disp-batches 0 >/dev/null 2>&1
[ -z "$(ls "$dir" | grep '^job\.' || true)" ] || fail "a trace was written without KVTRAIN_TRACE"
# A link planted at the predictable PREFIX.<pid>.json is not written
# through: the process says so and its file is left alone.
echo precious > "$dir/victim"
KVTRAIN_TRACE="$dir/planted" sh -c 'ln -s "$1" "$2.$$.json" && exec "$3" --num-epochs 1 \
  --num-examples 500 --disp-batches 0' _ "$dir/victim" "$dir/planted" "$train" \
  >"$dir/planted.out" 2>&1 || fail "the job failed with a planted trace link"
[ "$(cat "$dir/victim")" = precious ] || fail "the trace was written through a planted link"
grep -q "KVTRAIN_TRACE: cannot create $dir/planted\..*already there" "$dir/planted.out" ||
  { cat "$dir/planted.out"; fail "no error naming the planted trace file"; }
echo PASSED
