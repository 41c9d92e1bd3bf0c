// KV_HOST_DEVICE marks small inline functions that both the C++ compiler and
// nvcc compile (kernel headers share them between CPU and GPU code).
#ifndef KVTRAIN_OPS_HOST_DEVICE_H_
#define KVTRAIN_OPS_HOST_DEVICE_H_

#ifdef __CUDACC__
#define KV_HOST_DEVICE __host__ __device__
#else
#define KV_HOST_DEVICE
#endif

#endif  // KVTRAIN_OPS_HOST_DEVICE_H_
