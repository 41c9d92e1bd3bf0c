#!/usr/bin/env bash
# tools/plot_metrics turns metrics logs into a PNG, and names a bad log.
set -euo pipefail
tool="$(dirname "$0")/plot_metrics"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat > "$dir/run.jsonl" <<'LOG'
{"epoch":0,"batch":100,"speed":1000.0,"train-accuracy":0.5}
{"epoch":0,"time":1.0,"train-accuracy":0.70,"train-cross-entropy":0.9,"validation-accuracy":0.72,"validation-cross-entropy":0.8}
{"epoch":1,"time":1.0,"train-accuracy":0.80,"train-cross-entropy":0.6,"validation-accuracy":0.79,"validation-cross-entropy":0.62}
LOG
"$tool" -o "$dir/out.png" "$dir/run.jsonl"
[ "$(head -c 8 "$dir/out.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] \
  || { echo "not a PNG"; exit 1; }
[ "$(stat -c %s "$dir/out.png")" -gt 10000 ] || { echo "PNG too small"; exit 1; }
echo "not json" > "$dir/bad.jsonl"
set +e
err=$("$tool" -o "$dir/x.png" "$dir/bad.jsonl" 2>&1); rc=$?
set -e
[ $rc -ne 0 ] && grep -q "bad.jsonl:1: not JSON" <<< "$err"
echo "plot_metrics_test: ok"
