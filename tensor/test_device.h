// Test helper: the device a test source runs on. The same source is built
// twice, as a CPU test and (with -DKV_TEST_ON_GPU) as a GPU test tagged "gpu";
// the GPU build skips, reported as skipped, where no GPU can be used.
#ifndef KVTRAIN_TENSOR_TEST_DEVICE_H_
#define KVTRAIN_TENSOR_TEST_DEVICE_H_

#include <gtest/gtest.h>

#include "tensor/device.h"

namespace kvtrain {

inline Device TestDevice() {
#ifdef KV_TEST_ON_GPU
  return Device::GPU(0);
#else
  return Device::CPU();
#endif
}

}  // namespace kvtrain

// Put first in a test body (or SetUp): skips when the test device is a GPU
// that cannot be used here.
#define KV_SKIP_IF_NO_TEST_DEVICE()                                  \
  do {                                                               \
    if (::kvtrain::TestDevice().is_gpu() && ::kvtrain::NumGpus() == 0) { \
      GTEST_SKIP() << "no GPU: " << ::kvtrain::NoGpuReason();        \
    }                                                                \
  } while (0)

#endif  // KVTRAIN_TENSOR_TEST_DEVICE_H_
