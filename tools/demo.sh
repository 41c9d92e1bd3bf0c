#!/usr/bin/env bash
# Sets up the machine, builds kvtrain and runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
bazel build //...
bazel-bin/tools/kvtrain_info
