// Summing a key's values across devices, and copying a result to each.
#ifndef KVTRAIN_KVSTORE_DEVICE_SUM_H_
#define KVTRAIN_KVSTORE_DEVICE_SUM_H_

#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace kvtrain {
namespace kv {

// A new tensor on `device` holding the sum of `values` (inputs unchanged).
StatusOr<Tensor> SumOn(const std::vector<Tensor>& values, const Device& device);

// Copies `src` into every tensor of `outs`.
Status Broadcast(const Tensor& src, const std::vector<Tensor>& outs);

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_DEVICE_SUM_H_
