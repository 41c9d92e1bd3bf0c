// Device (where a tensor lives) and DeviceContext (the per-device resources:
// a CUDA stream and a cuBLAS handle on GPUs). CPU-only builds know GPUs by
// name but report "built without CUDA" when one is asked for.
#ifndef KVTRAIN_TENSOR_DEVICE_H_
#define KVTRAIN_TENSOR_DEVICE_H_

#include <memory>
#include <string>

#include "base/status.h"

namespace kvtrain {

// Value type: cpu(0), cpu(1) (several CPU contexts share host memory; they
// exist for data parallelism inside one process), gpu(0), gpu(1), ...
struct Device {
  enum class Type : uint8_t { kCPU = 0, kGPU = 1 };

  Type type = Type::kCPU;
  int id = 0;

  static Device CPU(int id = 0) { return Device{Type::kCPU, id}; }
  static Device GPU(int id) { return Device{Type::kGPU, id}; }

  bool is_cpu() const { return type == Type::kCPU; }
  bool is_gpu() const { return type == Type::kGPU; }

  // "cpu(0)", "gpu(1)".
  std::string ToString() const;
  // Accepts "cpu", "cpu(2)", "gpu(0)", "gpu0" and "gpu:0".
  static StatusOr<Device> Parse(const std::string& text);

  bool operator==(const Device& o) const {
    return type == o.type && id == o.id;
  }
  bool operator!=(const Device& o) const { return !(*this == o); }
  bool operator<(const Device& o) const {
    return type != o.type ? type < o.type : id < o.id;
  }
};

// True when this binary was compiled with --config=cuda.
bool BuiltWithCuda();
// Number of usable GPUs: 0 when built without CUDA or no driver/GPU exists.
int NumGpus();
// Why NumGpus() is 0 ("built without CUDA", "no CUDA device: ..."), or "".
std::string NoGpuReason();

// Ok if `device` can be used here; otherwise says why, e.g.
// "gpu(0) requested but kvtrain was built without CUDA (rebuild with
// --config=cuda)" or "gpu(3) requested but 1 GPU is present".
Status CheckDevice(const Device& device);

// Per-device resources, created on first use and kept for the life of the
// process. Get() is thread-safe. The stream and cuBLAS handle belong to the
// caller while it uses them: callers on several threads that share one
// device's context must order their work themselves (the engine does).
class DeviceContext {
 public:
  // The context of `device`; an error if the device cannot be used.
  static StatusOr<DeviceContext*> Get(const Device& device);

  const Device& device() const { return device_; }

  // cudaStream_t and cublasHandle_t as opaque pointers (null on CPU), so this
  // header needs no CUDA headers; see cuda_check.h for typed access.
  void* stream() const { return stream_; }
  void* cublas() const { return cublas_; }

  // Waits until all work queued on this device's stream is done.
  Status Synchronize() const;

  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

 private:
  explicit DeviceContext(const Device& device) : device_(device) {}
  Status InitGpu();

  Device device_;
  void* stream_ = nullptr;
  void* cublas_ = nullptr;
};

// A point in one GPU's stream: once it is passed, every operation queued on
// that stream before Record() has finished. Lets work queued on a stream
// count as done without draining the stream (the engine orders ops of one
// device by the stream and waits on fences only across streams and for the
// host). Thread-safe; CUDA events are reused from a process-wide pool.
class StreamFence {
 public:
  // A fence at the current end of `ctx`'s stream; null on a CPU context.
  static std::shared_ptr<StreamFence> Record(const DeviceContext* ctx);
  ~StreamFence();

  int device_id() const { return device_id_; }
  // Blocks until the fence is passed.
  void Wait() const;
  // True once the fence is passed (does not block).
  bool Passed() const;

  StreamFence(const StreamFence&) = delete;
  StreamFence& operator=(const StreamFence&) = delete;

 private:
  StreamFence(int device_id, void* event)
      : device_id_(device_id), event_(event) {}

  const int device_id_;
  void* const event_;  // cudaEvent_t
};

}  // namespace kvtrain

#endif  // KVTRAIN_TENSOR_DEVICE_H_
