// KeepFreedMemory: glibc mallopt settings for network-heavy processes.
#include "base/malloc_tuning.h"

#include <malloc.h>

namespace kvtrain {

bool KeepFreedMemory() {
  bool ok = mallopt(M_ARENA_MAX, 1) == 1;
  // glibc caps the mmap threshold (32 MiB on 64-bit); blocks below it come
  // from the heap and are reused.
  ok = (mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1) && ok;
  ok = (mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1) && ok;
  return ok;
}

}  // namespace kvtrain
