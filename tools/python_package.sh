#!/usr/bin/env bash
# Places the kvtrain Python package, ready to import, in a folder of its own:
#   tools/python_package.sh DIR
# writes DIR/kvtrain/ (the package and its extension _kvtrain.so) and the
# Python examples beside it, so a script in DIR imports kvtrain with no
# PYTHONPATH. Copy a job's folder to hosts without kvtrain this way:
#   tools/python_package.sh job && cd job &&
#   ../tracker/launch.py -n 2 -H hosts --sync-dst-dir /tmp/kvtrain-job \
#       /usr/bin/python3 train_mnist.py --kv-store dist_sync
# (the hosts need the same Debian libraries as this one: see docs/python.md).
# Builds the extension first when it is missing.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$1"
so=""
for candidate in "$root/bazel-bin/python/kvtrain/_kvtrain.so" "$root/python/kvtrain/_kvtrain.so"; do
  if [ -f "$candidate" ]; then so="$candidate"; break; fi
done
if [ -z "$so" ]; then
  (cd "$root" && bazel build //python:kvtrain)
  so="$root/bazel-bin/python/kvtrain/_kvtrain.so"
fi
mkdir -p "$dest/kvtrain"
cp "$root"/python/kvtrain/*.py "$dest/kvtrain/"
cp "$so" "$dest/kvtrain/_kvtrain.so"
chmod u+w "$dest/kvtrain/_kvtrain.so"
cp "$root"/examples/python/*.py "$dest/"
echo "kvtrain package in $dest/kvtrain (run scripts in $dest with /usr/bin/python3)"
