#!/usr/bin/env bash
# kvtrain_checkpoint show/diff on checkpoints made for the purpose.
set -euo pipefail
here=$(dirname "$0")
tool="$here/kvtrain_checkpoint"; make="$here/make_test_checkpoints"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$make" "$dir"

out=$("$tool" show "$dir/a.params")
echo "$out"
grep -q "epoch 3, 2 parameters, 1 auxiliary states" <<< "$out"
grep -Eq "arg +fc1_weight +\(2, 2\) +min 1 +max 4 +mean 2.5" <<< "$out"

"$tool" diff "$dir/a.params" "$dir/b.params" | tee "$dir/ab"
grep -q "equal within tolerance" "$dir/ab"

set +e
"$tool" diff "$dir/a.params" "$dir/c.params" > "$dir/ac"; rc=$?
set -e
cat "$dir/ac"
[ $rc -eq 1 ] || { echo "diff of different checkpoints exited $rc"; exit 1; }
grep -Eq "fc1_bias .*max abs diff 0.25 .*DIFFERS" "$dir/ac"

set +e
"$tool" show "$dir/missing.params" 2> "$dir/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "does not exist" "$dir/err"
echo "checkpoint_tool_test: ok"
