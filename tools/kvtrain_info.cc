// kvtrain_info: what this build and machine offer (CUDA, GPUs, CPU threads),
// how the distributed-job environment parses, and a quick GEMM speed check.
#include <chrono>
#include <cstdio>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "net/node_config.h"
#include "net/curve.h"
#include "ops/cudnn.h"
#include "tensor/blas.h"
#include "tensor/cpu_threads.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

DEFINE_int32(gemm_size, 512, "matrix size of the GEMM speed check (0: skip)");

namespace kvtrain {
namespace {

void TimeGemm(const Device& dev, int n) {
  Tensor a = Tensor::Empty({n, n}, DType::kFloat32, dev);
  Tensor b = Tensor::Empty({n, n}, DType::kFloat32, dev);
  Tensor c = Tensor::Zeros({n, n}, DType::kFloat32, dev);
  CHECK(a.Fill(1).ok() && b.Fill(0.5).ok());
  DeviceContext* ctx = *DeviceContext::Get(dev);
  CHECK(blas::Gemm(a, false, b, false, 1, 0, &c).ok());  // warm-up
  CHECK(ctx->Synchronize().ok());
  const int reps = 10;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) {
    CHECK(blas::Gemm(a, false, b, false, 1, 0, &c).ok());
  }
  CHECK(ctx->Synchronize().ok());
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  const double want = 0.5 * n;
  const float got = c.ToVector()[0];
  std::printf("gemm %dx%dx%d on %s: %.1f GFLOP/s (c[0]=%g, expected %g)\n", n,
              n, n, dev.ToString().c_str(), 2.0 * n * n * n * reps / s / 1e9,
              got, want);
}

int Main() {
  std::printf("kvtrain built with CUDA: %s\n", BuiltWithCuda() ? "yes" : "no");
  std::printf("GPUs: %d%s%s\n", NumGpus(), NumGpus() ? "" : " (",
              NumGpus() ? "" : (NoGpuReason() + ")").c_str());
  if (BuiltWithCuda()) {
    std::printf("cuDNN (loaded): %s\n", cudnn::Version().c_str());
  }
  StatusOr<int> threads = CpuThreadsFromEnv(ProcessEnv());
  if (!threads.ok()) {
    std::fprintf(stderr, "error: %s\n", threads.status().message().c_str());
    return 2;
  }
  SetCpuThreads(*threads);
  std::printf("CPU threads: %d\n", CpuThreads());
  if (NodeConfig::InDistributedJob(ProcessEnv())) {
    StatusOr<NodeConfig> config = NodeConfig::FromEnv(ProcessEnv());
    if (!config.ok()) {
      std::fprintf(stderr, "error: %s\n", config.status().message().c_str());
      return 2;
    }
    std::printf("distributed job: %s\n", config->DebugString().c_str());
    StatusOr<net::JobKey> key = net::JobKey::FromEnv(ProcessEnv());
    if (!key.ok()) {
      std::printf("security: error: %s\n", key.status().message().c_str());
    } else {
      std::printf("security: %s\n",
                  key->secure() ? ("CURVE on, job key " + key->Fingerprint())
                                      .c_str()
                                : "off (KVTRAIN_INSECURE=1)");
    }
  } else {
    std::printf("distributed job: no (DMLC_ROLE unset: single process)\n");
  }
  if (FLAGS_gemm_size > 0) {
    TimeGemm(Device::CPU(), FLAGS_gemm_size);
    for (int g = 0; g < NumGpus(); ++g) TimeGemm(Device::GPU(g), FLAGS_gemm_size);
  }
  return 0;
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  gflags::SetUsageMessage("Prints what this kvtrain build and machine offer.");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  return kvtrain::Main();
}
