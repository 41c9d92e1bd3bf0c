// CRC32C (Castagnoli), the checksum of kvtrain's checkpoint files: the SSE4.2
// instruction where the build targets it, a table otherwise.
#ifndef KVTRAIN_BASE_CRC32C_H_
#define KVTRAIN_BASE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace kvtrain {

// The CRC32C of `n` bytes; `crc` continues an earlier value (0 to start).
// Crc32c("123456789", 9) == 0xe3069283.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace kvtrain

#endif  // KVTRAIN_BASE_CRC32C_H_
