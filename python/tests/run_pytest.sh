#!/usr/bin/env bash
# Runs pytest files of the kvtrain package with Debian's /usr/bin/python3
# (the interpreter the extension is built for), writing one JUnit testcase
# per case to $XML_OUTPUT_FILE (set by `bazel test`) so that
# tools/test_summary.py counts them. Usage: run_pytest.sh FILE...
set -euo pipefail
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider \
  --junitxml="${XML_OUTPUT_FILE:-/dev/null}" "$@"
