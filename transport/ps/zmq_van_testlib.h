// Shared by the ZmqVan tests over loopback: a van with test settings, a
// receive with a generous deadline, and patterned frames.
#ifndef KVTRAIN_TRANSPORT_PS_ZMQ_VAN_TESTLIB_H_
#define KVTRAIN_TRANSPORT_PS_ZMQ_VAN_TESTLIB_H_

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "transport/ps/zmq_van.h"

namespace kvtrain {
namespace ps {
namespace zmq_van_test {

inline std::unique_ptr<ZmqVan> MakeVan(
    const std::string& token, int64_t window = 4 << 20,
    int64_t shm_bytes = ZmqVanOptions().shm_bytes, bool shm_ring = true) {
  ZmqVanOptions o;
  o.send_window_bytes = window;
  o.shm_bytes = shm_bytes;
  o.shm_ring = shm_ring;
  o.poll_interval = std::chrono::milliseconds(20);
  auto van = ZmqVan::Create(token, o);
  EXPECT_TRUE(van.ok());
  return std::move(*van);
}

// Receives one message within a generous deadline.
inline RawMessage RecvOne(ZmqVan* van) {
  RawMessage msg;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    StatusOr<bool> got = van->Recv(&msg);
    EXPECT_TRUE(got.ok()) << got.status();
    if (got.ok() && *got) return msg;
  }
  ADD_FAILURE() << "nothing received";
  return msg;
}

inline Blob Pattern(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<char>((i * 31 + seed) & 0xff);
  return Blob::FromVector(std::move(v));
}

inline bool Same(const Blob& a, const Blob& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace zmq_van_test
}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_ZMQ_VAN_TESTLIB_H_
