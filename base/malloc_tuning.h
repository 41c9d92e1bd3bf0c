// glibc malloc tuning for processes that receive large messages: keep freed
// memory mapped and reuse it, so each multi-megabyte receive buffer is not
// page-faulted in (and zeroed by the kernel) anew.
#ifndef KVTRAIN_BASE_MALLOC_TUNING_H_
#define KVTRAIN_BASE_MALLOC_TUNING_H_

namespace kvtrain {

// One arena, mmap only for very large blocks, no trimming of freed memory.
// Process-wide; call before the traffic starts. Returns false if glibc
// refused a setting.
bool KeepFreedMemory();

}  // namespace kvtrain

#endif  // KVTRAIN_BASE_MALLOC_TUNING_H_
