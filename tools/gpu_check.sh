#!/usr/bin/env bash
# GPU checks on a machine that has a GPU but no build environment.
#
#   tools/gpu_check.sh pack DIR   (here, after a --config=cuda build)
#       copies every `gpu`-tagged test, train_mnist, train_bench and
#       kvtrain_info with the shared libraries they need (not libc, the
#       driver, cuBLAS or cuDNN, which the GPU machine's CUDA or PyTorch
#       provides: cuDNN's engines alone are over 300 MB) and a small
#       Fashion-MNIST set (the 10,000 test images, also as the training set)
#       into DIR.
#   tools/gpu_check.sh run DIR    (on the GPU machine)
#       runs each GPU test, kvtrain_info, train_bench, and train_mnist on
#       gpu(0) alone and as a launch.py job (run it from the repository
#       root), and ends with `N passed, N failed` (test binaries and training
#       runs; a GPU test that ran no case counts as failed here: the point is
#       a GPU).
set -uo pipefail

pack() {
  local dir=$1
  cd "$(dirname "$0")/.."
  local tests
  tests=$(bazel query 'attr(tags, gpu, tests(//...))' 2>/dev/null) || return 1
  # shellcheck disable=SC2086
  bazel build $tests //examples:train_mnist //bench:train_bench //tools:kvtrain_info || return 1
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib" "$dir/data" || return 1
  local bins=()
  for t in $tests //examples:train_mnist //bench:train_bench //tools:kvtrain_info; do
    local path="bazel-bin/${t#//}"
    path="${path/://}"
    cp "$path" "$dir/bin/" && bins+=("$path")
  done
  # Libraries by resolved path; the GPU machine brings libc, the driver,
  # cudart, cuBLAS and cuDNN.
  ldd "${bins[@]}" | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*)\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  local data=/usr/share/datasets/fashion-mnist
  cp "$data"/t10k-* "$dir/data/"
  cp "$data/t10k-images-idx3-ubyte.gz" "$dir/data/train-images-idx3-ubyte.gz"
  cp "$data/t10k-labels-idx1-ubyte.gz" "$dir/data/train-labels-idx1-ubyte.gz"
  du -sh "$dir"
}

run() {
  local dir
  dir=$(cd "$1" && pwd) || return 1
  # cudart, cuBLAS and cuDNN from the machine's CUDA (toolkit or the pip
  # wheels PyTorch uses).
  local cuda_libs=""
  for name in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
    local found
    found=$(find /usr/local/cuda*/ /usr/lib /opt -name "$name" 2>/dev/null | head -n 1)
    if [ -z "$found" ]; then
      echo "gpu_check: $name not found on this machine" >&2
      return 1
    fi
    cuda_libs="$cuda_libs:$(dirname "$found")"
  done
  export LD_LIBRARY_PATH="$dir/lib$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  local passed=0 failed=0
  for t in "$dir"/bin/*_test_gpu; do
    local log
    log=$("$t" 2>&1)
    local rc=$?
    local ran skipped
    ran=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' <<<"$log")
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' <<<"$log")
    if [ $rc -eq 0 ] && [ "${ran:-0}" -gt 0 ]; then
      echo "PASSED $(basename "$t") (${ran} cases, ${skipped:-0} skipped)"
      passed=$((passed + 1))
    else
      echo "FAILED $(basename "$t") (exit $rc, ${ran:-0} passed, ${skipped:-0} skipped)"
      tail -n 30 <<<"$log"
      failed=$((failed + 1))
    fi
  done
  echo
  "$dir/bin/kvtrain_info" || failed=$((failed + 1))
  echo
  # The PyTorch peer runs under the python3 on PATH (it should have torch
  # with CUDA); run from the repository root, where bench/torch_bench.py is.
  # GPU rows only: the CPU rows of a GPU host say nothing about the GPU.
  "$dir/bin/train_bench" --threads= --python "$(command -v python3)" || failed=$((failed + 1))
  echo
  # Training on gpu(0): alone (local and device stores), and as 2 workers
  # and 1 server (dist_device_sync; also with 2bit gradient compression,
  # where the workers update on the GPU from the servers' level answers, and
  # with half pulls, where the servers update) started by launch.py.
  local runs=(
    "--network mlp --kv-store local"
    "--network lenet --kv-store device"
    "launch --network mlp --kv-store dist_device_sync"
    "launch --network mlp --kv-store dist_device_sync --gc-type 2bit --gc-threshold 2 --gc-min-bytes 65536"
    "launch --network mlp --kv-store dist_device_sync --gc-type 2bit --gc-threshold 2 --gc-min-bytes 65536 --gc-pull fp16"
  )
  for r in "${runs[@]}"; do
    local argv=($r) cmd=()
    if [ "${argv[0]}" = launch ]; then
      argv=("${argv[@]:1}")
      cmd=(tracker/launch.py -n 2 -s 1 --launcher local)
    fi
    echo "== train_mnist --gpus 0 ${argv[*]}"
    if "${cmd[@]}" "$dir/bin/train_mnist" --gpus 0 "${argv[@]}" --num-epochs 2 \
        --data-dir "$dir/data" > "$dir/train.log" 2>&1; then
      grep -E "Time cost|Test accuracy" "$dir/train.log" | tail -n 3
      passed=$((passed + 1))
    else
      tail -n 20 "$dir/train.log"
      echo "FAILED train_mnist --gpus 0 ${argv[*]}"
      failed=$((failed + 1))
    fi
  done
  echo "$passed passed, $failed failed"
  [ $failed -eq 0 ]
}

case "${1:-}" in
  pack) [ $# -eq 2 ] && pack "$2" ;;
  run) [ $# -eq 2 ] && run "$2" ;;
  *) echo "usage: tools/gpu_check.sh pack DIR | run DIR" >&2; exit 2 ;;
esac
