// Helpers of the ZmqVan security tests: a listening van, a sending van that
// records refused handshakes, and receiving with a deadline.
#ifndef KVTRAIN_TRANSPORT_PS_ZMQ_VAN_SECURITY_TESTLIB_H_
#define KVTRAIN_TRANSPORT_PS_ZMQ_VAN_SECURITY_TESTLIB_H_

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "net/curve.h"
#include "transport/ps/zmq_van.h"

namespace kvtrain {
namespace ps {
namespace security_test {

using net::JobKey;

// A ZmqVan that listens, and what its connecting peers saw.
struct Listener {
  explicit Listener(const JobKey& key) {
    ZmqVanOptions o;
    o.key = key;
    o.poll_interval = std::chrono::milliseconds(20);
    van = ZmqVan::Create("listener", o).value();
    port = *van->Bind(0);
  }
  // Receives for up to `timeout`; the first message's first frame, or "".
  std::string RecvOne(Duration timeout) {
    const auto deadline = Clock::now() + timeout;
    RawMessage m;
    while (Clock::now() < deadline) {
      StatusOr<bool> got = van->Recv(&m);
      if (got.ok() && *got && !m.frames.empty()) {
        return std::string(m.frames[0].data(), m.frames[0].size());
      }
    }
    return "";
  }
  std::unique_ptr<ZmqVan> van;
  int port = 0;
};

// A connecting ZmqVan that records refused handshakes.
struct Sender {
  // `token`: its routing id (one per peer of a node).
  explicit Sender(const JobKey& key, const std::string& token = "sender") {
    ZmqVanOptions o;
    o.key = key;
    van = ZmqVan::Create(token, o).value();
    van->SetHandshakeFailureHandler(
        [this](int, const std::string&, const std::string& w, int n,
               bool final) {
          std::lock_guard<std::mutex> l(mu);
          why = w;
          in_a_row = final ? 1000 : n;
        });
  }
  Status SendTo(int port, const std::string& text) {
    KV_RETURN_IF_ERROR(van->Connect(1, "127.0.0.1", port, ""));
    return van->Send(1, 0, {Blob::Copy(text.data(), text.size())});
  }
  bool WaitRefused(int times) {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (in_a_row >= times) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  std::unique_ptr<ZmqVan> van;
  std::mutex mu;
  std::string why;
  int in_a_row = 0;
};

inline std::unique_ptr<ZmqVan> MakeVan(const std::string& token, const JobKey& key) {
  ZmqVanOptions o;
  o.key = key;
  o.poll_interval = std::chrono::milliseconds(20);
  auto van = ZmqVan::Create(token, o);
  EXPECT_TRUE(van.ok()) << van.status();
  return std::move(*van);
}

// Receives for `d`; the message or nothing.
inline bool RecvWithin(ZmqVan* van, Duration d, RawMessage* msg) {
  const auto deadline = Clock::now() + d;
  while (Clock::now() < deadline) {
    StatusOr<bool> got = van->Recv(msg);
    EXPECT_TRUE(got.ok()) << got.status();
    if (got.ok() && *got) return true;
  }
  return false;
}


}  // namespace security_test
}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_ZMQ_VAN_SECURITY_TESTLIB_H_
