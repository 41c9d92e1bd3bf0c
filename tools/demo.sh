#!/usr/bin/env bash
# The main job: sets up the machine, builds kvtrain, and trains the MLP on the
# bundled Fashion-MNIST with 2 workers and 2 servers (dist_sync) started by
# tracker/launch.py on this machine. Extra arguments go to train_mnist, e.g.
#   tools/demo.sh --network lenet --num-epochs 3
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
bazel build //examples:train_mnist //tools:kvtrain_checkpoint
rm -rf demo-output && mkdir -p demo-output
# Each worker may use one core: 4 processes share this machine.
OMP_NUM_THREADS=1 python3 tracker/launch.py -n 2 -s 2 --launcher local \
  bazel-bin/examples/train_mnist --kv-store dist_sync --num-epochs 10 \
  --model-prefix demo-output/mlp --metrics-file demo-output/metrics.jsonl "$@"
last=$(ls demo-output/mlp-*.params | tail -n 1)
bazel-bin/tools/kvtrain_checkpoint show "$last" | head -n 1
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 tools/plot_metrics -o demo-output/metrics.png demo-output/metrics.jsonl
fi
