#!/usr/bin/env bash
# Installs every Debian package kvtrain needs that is missing (apt-get update
# only when something is missing), then configures the build: --config=cuda
# when nvcc is present (KVTRAIN_CUDA=0 turns that off). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build and test dependencies, one group per purpose.
PACKAGES=(
  # build
  bazel-bootstrap bazel-rules-java g++ python3
  # libraries
  libzmq3-dev cppzmq-dev libssl-dev libprotobuf-dev protobuf-compiler
  libgoogle-glog-dev libgflags-dev libgtest-dev libopenblas-dev zlib1g-dev
  # the default data set (Fashion-MNIST IDX files)
  dataset-fashion-mnist
  # launchers and their tests: ssh (with a test sshd), rsync, Open MPI,
  # Slurm (a test cluster of slurmctld + slurmd + munge), network
  # namespaces (ethtool: the emulated cluster's links), the process table
  openssh-client openssh-server rsync openmpi-bin iproute2 ethtool procps
  slurm-client slurmctld slurmd munge
  # tools/plot_metrics
  python3-matplotlib
  # the Python package (python/): the extension's headers and its tests;
  # PyTorch for kvtrain.torch and the benchmarks' PyTorch peers
  pybind11-dev python3-dev python3-numpy python3-pytest python3-torch
  # tools/fuzz.sh: clang with libFuzzer and AddressSanitizer (bookworm: 14)
  clang libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = "installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: error: packages missing (${missing[*]}) and not running as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get update -q >/tmp/kvtrain-apt-update.log 2>&1; then
    echo "setup: error: apt-get update failed (see /tmp/kvtrain-apt-update.log)" >&2
    exit 1
  fi
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" \
      >/tmp/kvtrain-apt-install.log 2>&1; then
    for p in "${missing[@]}"; do
      if ! apt-cache show "$p" >/dev/null 2>&1; then
        echo "setup: error: package $p cannot be found in the configured apt sources" >&2
      fi
    done
    echo "setup: error: apt-get install failed (see /tmp/kvtrain-apt-install.log)" >&2
    exit 1
  fi
  echo "setup: installed ${missing[*]}"
else
  echo "setup: all ${#PACKAGES[@]} packages present"
fi

# CUDA: build every kernel when the toolkit is there, so CPU-only machines
# still compile the .cu files (GPU tests then skip).
nvcc=/usr/local/cuda/bin/nvcc
if [ "${KVTRAIN_CUDA:-1}" != "0" ] && [ -x "$nvcc" ]; then
  want="build --config=cuda"
  echo "setup: CUDA toolkit found ($($nvcc --version | tail -n 2 | head -n 1)); building with --config=cuda"
else
  want=""
  echo "setup: building CPU-only (no $nvcc, or KVTRAIN_CUDA=0)"
fi
if [ "$(cat .bazelrc.user 2>/dev/null || true)" != "$want" ]; then
  printf '%s\n' "$want" > .bazelrc.user
fi
