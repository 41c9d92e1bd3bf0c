// Device parsing, GPU discovery and per-device contexts.
#include "tensor/device.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#ifdef KVTRAIN_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "tensor/cuda_check.h"
#endif

namespace kvtrain {

std::string Device::ToString() const {
  return std::string(is_gpu() ? "gpu(" : "cpu(") + std::to_string(id) + ")";
}

StatusOr<Device> Device::Parse(const std::string& text) {
  auto bad = [&text] {
    return Status::InvalidArgument("cannot parse device \"" + text +
                                   "\": expected cpu, cpu(N) or gpu(N)");
  };
  std::string kind = text.substr(0, 3);
  if (kind != "cpu" && kind != "gpu") return bad();
  std::string rest = text.substr(3);
  int id = 0;
  if (rest.empty()) {
    if (kind == "gpu") return bad();
  } else {
    if (rest.front() == '(' && rest.back() == ')') {
      rest = rest.substr(1, rest.size() - 2);
    } else if (rest.front() == ':') {
      rest = rest.substr(1);
    }
    char* end = nullptr;
    const long v = std::strtol(rest.c_str(), &end, 10);
    if (rest.empty() || *end != '\0' || v < 0 || v > 1024) return bad();
    id = static_cast<int>(v);
  }
  return kind == "gpu" ? Device::GPU(id) : Device::CPU(id);
}

namespace {

struct GpuInfo {
  int count = 0;
  std::string reason;
};

const GpuInfo& Gpus() {
  static const GpuInfo info = [] {
    GpuInfo g;
#ifdef KVTRAIN_CUDA
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      g.reason = std::string("no CUDA device: ") + cudaGetErrorString(err);
      (void)cudaGetLastError();  // clear the sticky error
    } else if (n == 0) {
      g.reason = "no CUDA device present";
    }
    g.count = err == cudaSuccess ? n : 0;
#else
    g.reason = "kvtrain was built without CUDA (rebuild with --config=cuda)";
#endif
    return g;
  }();
  return info;
}

}  // namespace

bool BuiltWithCuda() {
#ifdef KVTRAIN_CUDA
  return true;
#else
  return false;
#endif
}

int NumGpus() { return Gpus().count; }

std::string NoGpuReason() { return Gpus().count > 0 ? "" : Gpus().reason; }

Status CheckDevice(const Device& device) {
  if (device.id < 0) {
    return Status::InvalidArgument("negative device id in " +
                                   device.ToString());
  }
  if (device.is_cpu()) return Status::OK();
  if (!BuiltWithCuda()) {
    return Status::Unavailable(device.ToString() +
                               " requested but kvtrain was built without CUDA "
                               "(rebuild with --config=cuda)");
  }
  const int n = NumGpus();
  if (n == 0) {
    return Status::Unavailable(device.ToString() + " requested but " +
                               NoGpuReason());
  }
  if (device.id >= n) {
    return Status::Unavailable(device.ToString() + " requested but " +
                               std::to_string(n) +
                               (n == 1 ? " GPU is" : " GPUs are") +
                               " present");
  }
  return Status::OK();
}

StatusOr<DeviceContext*> DeviceContext::Get(const Device& device) {
  static std::mutex mu;
  static auto* contexts = new std::map<Device, std::unique_ptr<DeviceContext>>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = contexts->find(device);
  if (it != contexts->end()) return it->second.get();
  KV_RETURN_IF_ERROR(CheckDevice(device));
  std::unique_ptr<DeviceContext> ctx(new DeviceContext(device));
  if (device.is_gpu()) KV_RETURN_IF_ERROR(ctx->InitGpu());
  DeviceContext* raw = ctx.get();
  contexts->emplace(device, std::move(ctx));
  return raw;
}

Status DeviceContext::InitGpu() {
#ifdef KVTRAIN_CUDA
  KV_CUDA_CHECK(cudaSetDevice(device_.id));
  cudaStream_t stream = nullptr;
  KV_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle = nullptr;
  const cublasStatus_t st = cublasCreate(&handle);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return Status::Unavailable("cannot create a cuBLAS handle on " +
                               device_.ToString() + ": " +
                               CublasStatusName(st));
  }
  KV_CUBLAS_CHECK(cublasSetStream(handle, stream));
  // Plain FP32 math (no TF32) so GPU results stay comparable with the CPU's.
  KV_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  stream_ = stream;
  cublas_ = handle;
  return Status::OK();
#else
  return CheckDevice(device_);
#endif
}

Status DeviceContext::Synchronize() const {
#ifdef KVTRAIN_CUDA
  if (device_.is_gpu()) {
    KV_CUDA_CHECK(cudaSetDevice(device_.id));
    KV_CUDA_CHECK(cudaStreamSynchronize(KV_CUDA_STREAM(this)));
  }
#endif
  return Status::OK();
}

#ifdef KVTRAIN_CUDA
namespace {

// Idle events (no StreamFence holds them), per GPU.
std::mutex fence_pool_mu;
std::map<int, std::vector<cudaEvent_t>>* FencePool() {
  static auto* pool = new std::map<int, std::vector<cudaEvent_t>>;
  return pool;
}

}  // namespace
#endif

std::shared_ptr<StreamFence> StreamFence::Record(const DeviceContext* ctx) {
#ifdef KVTRAIN_CUDA
  if (!ctx->device().is_gpu()) return nullptr;
  const int id = ctx->device().id;
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(fence_pool_mu);
    std::vector<cudaEvent_t>& idle = (*FencePool())[id];
    if (!idle.empty()) {
      event = idle.back();
      idle.pop_back();
    }
  }
  KV_CUDA_CHECK(cudaSetDevice(id));
  if (event == nullptr) {
    KV_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  KV_CUDA_CHECK(cudaEventRecord(event, KV_CUDA_STREAM(ctx)));
  return std::shared_ptr<StreamFence>(new StreamFence(id, event));
#else
  (void)ctx;
  return nullptr;
#endif
}

StreamFence::~StreamFence() {
#ifdef KVTRAIN_CUDA
  // Nobody can wait on it any more: the event may be recorded again.
  std::lock_guard<std::mutex> lock(fence_pool_mu);
  (*FencePool())[device_id_].push_back(static_cast<cudaEvent_t>(event_));
#endif
}

void StreamFence::Wait() const {
#ifdef KVTRAIN_CUDA
  KV_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
#endif
}

bool StreamFence::Passed() const {
#ifdef KVTRAIN_CUDA
  const cudaError_t st = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (st == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: keep it from later checks
    return false;
  }
  KV_CUDA_CHECK(st);
#endif
  return true;
}

}  // namespace kvtrain
