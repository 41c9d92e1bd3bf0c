// Zero-copy frames: a frame sends the caller's bytes in place and releases
// them once ZeroMQ is done; a received frame keeps ZeroMQ's bytes alive.
#include "net/zmq_frame.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace kvtrain {
namespace net {
namespace {

struct Released {
  std::atomic<int> count{0};
  std::atomic<const void*> data{nullptr};
};

void Release(void* data, void* hint) {
  auto* r = static_cast<Released*>(hint);
  r->data.store(data);
  r->count.fetch_add(1);
}

TEST(ZmqFrameTest, SendsInPlaceAndReleasesOnceDelivered) {
  void* ctx = zmq_ctx_new();
  void* a = zmq_socket(ctx, ZMQ_PAIR);
  void* b = zmq_socket(ctx, ZMQ_PAIR);
  ASSERT_EQ(zmq_bind(a, "inproc://zmq-frame-test"), 0);
  ASSERT_EQ(zmq_connect(b, "inproc://zmq-frame-test"), 0);
  const std::string bytes(1 << 16, 'x');
  Released r;
  zmq_msg_t m;
  ASSERT_TRUE(InitZeroCopy(&m, bytes.data(), bytes.size(), Release, &r).ok());
  ASSERT_EQ(zmq_msg_send(&m, a, 0), static_cast<int>(bytes.size()));
  {
    ZmqFrame got;
    ASSERT_EQ(zmq_msg_recv(&got.msg, b, 0), static_cast<int>(bytes.size()));
    EXPECT_EQ(std::string(got.data(), got.size()), bytes);
    // inproc hands the very buffer over: no copy was made.
    EXPECT_EQ(static_cast<const void*>(got.data()), bytes.data());
    EXPECT_EQ(r.count.load(), 0) << "released while the receiver holds it";
  }
  EXPECT_EQ(r.count.load(), 1);
  EXPECT_EQ(r.data.load(), bytes.data());
  zmq_close(a);
  zmq_close(b);
  zmq_ctx_term(ctx);
}

TEST(ZmqFrameTest, AnEmptyOrUnsentFrameIsReleasedWhenClosed) {
  Released r;
  zmq_msg_t m;
  ASSERT_TRUE(InitZeroCopy(&m, nullptr, 0, Release, &r).ok());
  EXPECT_EQ(zmq_msg_size(&m), 0u);
  EXPECT_EQ(r.count.load(), 0);
  zmq_msg_close(&m);
  EXPECT_EQ(r.count.load(), 1);
}

}  // namespace
}  // namespace net
}  // namespace kvtrain
