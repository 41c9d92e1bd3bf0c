// ZmqVan over loopback: zero-copy send (the Blob is released once written),
// received frames as views, routing tokens, port in use, and a backlog that
// leaves in priority order.
#include "transport/ps/zmq_van.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "transport/ps/zmq_van_conn.h"
#include "transport/ps/zmq_van_testlib.h"
#include "net/curve.h"

namespace kvtrain {
namespace ps {
namespace {

using ::testing::HasSubstr;
using zmq_van_test::MakeVan;
using zmq_van_test::RecvOne;

TEST(ZmqVanTest, FramesTravelWithoutCopiesAndAreReleased) {
  auto a = MakeVan("a-token");
  auto b = MakeVan("b-token");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_GT(*port, 0);
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, "").ok());
  std::vector<float> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i);
  Blob payload = Blob::FromVector(big);
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("head"), payload, Blob()}).ok());
  RawMessage got = RecvOne(b.get());
  EXPECT_EQ(got.token, "a-token");
  ASSERT_EQ(got.frames.size(), 3u);
  EXPECT_EQ(got.frames[0].ToString(), "head");
  ASSERT_EQ(got.frames[1].size(), big.size() * 4);
  EXPECT_EQ(std::memcmp(got.frames[1].data(), big.data(), big.size() * 4), 0);
  EXPECT_EQ(got.frames[2].size(), 0u);
  // ZeroMQ held our buffer (no copy) and lets go once it is written out.
  a->Flush(std::chrono::seconds(20));
  EXPECT_EQ(payload.use_count(), 1);
  // The received frame is a view that outlives the van's next receive.
  Blob keep = got.frames[1];
  got = RawMessage();
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("again")}).ok());
  RecvOne(b.get());
  EXPECT_EQ(keep.as<float>()[12345], 12345.0f);
}

// Receivers refuse frames above net::kMaxFrameBytes (closing the
// connection): the van refuses to send one (EncodeMessage splits data).
// An idle Recv sleeps up to the poll interval (an hour here): Wake, from
// another thread, ends it at once; a message that comes after still arrives.
TEST(ZmqVanTest, WakeEndsARecvThatWouldSleepAnHour) {
  ZmqVanOptions o;
  o.poll_interval = std::chrono::hours(1);
  StatusOr<std::unique_ptr<ZmqVan>> made = ZmqVan::Create("b", o);
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<ZmqVan> b = std::move(*made);
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok()) << port.status();
  std::atomic<bool> returned{false};
  std::thread waker([&] {
    // Until Recv has returned: a Wake before it sleeps counts too.
    while (!returned.load()) {
      b->Wake();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  RawMessage msg;
  StatusOr<bool> got = b->Recv(&msg);
  returned.store(true);
  waker.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(*got);
  auto a = MakeVan("a");
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, "").ok());
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("after")}).ok());
  got = b->Recv(&msg);
  ASSERT_TRUE(got.ok() && *got);
  EXPECT_EQ(msg.frames[0].ToString(), "after");
}

TEST(ZmqVanTest, FramesAboveTheLimitAreRefused) {
  auto a = MakeVan("a");
  auto b = MakeVan("b");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, "").ok());
  Blob over = Blob::FromVector(std::vector<char>(net::kMaxFramePayloadBytes + 1, 'x'));
  Status s = a->Send(1, 0, {Blob::FromString("head"), over});
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("frame 1 holds 4194305 bytes, above the 4194304 a "
                                     "receiver accepts"));
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("fine")}).ok());
  EXPECT_EQ(RecvOne(b.get()).frames[0].ToString(), "fine");
}

TEST(ZmqVanTest, PortInUseIsAClearError) {
  auto a = MakeVan("a");
  auto b = MakeVan("b");
  StatusOr<int> port = a->Bind(0);
  ASSERT_TRUE(port.ok());
  StatusOr<int> again = b->Bind(*port);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Status::Code::kAlreadyExists);
  EXPECT_THAT(
      again.status().message(),
      HasSubstr("port " + std::to_string(*port) + " is already in use"));
}

TEST(ZmqVanTest, BacklogLeavesHighestPriorityFirst) {
  auto a = MakeVan("a", /*window=*/1);
  auto b = MakeVan("b");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, "").ok());
  // The first message fills the window; the rest wait and are reordered.
  Blob big = Blob::FromVector(std::vector<char>(net::kMaxFramePayloadBytes, 'x'));
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("big"), big, big, big, big, big, big, big, big})
                  .ok());
  const std::vector<std::pair<int, std::string>> rest = {
      {1, "low"}, {9, "high"}, {5, "mid"}, {9, "high2"}};
  for (const auto& [prio, tag] : rest) {
    ASSERT_TRUE(a->Send(1, prio, {Blob::FromString(tag)}).ok());
  }
  std::vector<std::string> order;
  for (int i = 0; i < 5; ++i)
    order.push_back(RecvOne(b.get()).frames[0].ToString());
  EXPECT_EQ(order,
            (std::vector<std::string>{"big", "high", "high2", "mid", "low"}));
}

TEST(ZmqVanTest, SendsWaitForAPeerThatBindsLater) {
  auto a = MakeVan("a");
  auto probe = MakeVan("probe");
  StatusOr<int> port = probe->Bind(0);
  ASSERT_TRUE(port.ok());
  probe->Close(Duration::zero());
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, "").ok());
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("early")}).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto b = MakeVan("b");
  ASSERT_TRUE(b->Bind(*port).ok());
  EXPECT_EQ(RecvOne(b.get()).frames[0].ToString(), "early");
  EXPECT_EQ(a->Send(7, 0, {}).code(), Status::Code::kUnavailable);
}

// A part ZeroMQ refuses after earlier parts of its message went (a send
// failure in the middle of a message) leaves the message unfinished in
// ZeroMQ, where the next message's parts would be glued to it: the
// connection is closed instead, and the error names the peer. A signal
// that interrupts a part is not a failure: the part goes again.
std::atomic<int> send_calls{0};
int FailThirdCall(zmq_msg_t* msg, void* socket, int flags) {
  const int n = ++send_calls;
  if (n == 2) {
    errno = EINTR;
    return -1;
  }
  if (n == 4) {
    errno = EFAULT;
    return -1;
  }
  return zmq_msg_send(msg, socket, flags);
}

TEST(ZmqVanTest, ASendTornInTheMiddleClosesTheConnection) {
  ZmqVanOptions o;
  o.key = net::JobKey::Insecure();
  auto van = ZmqVan::Create("sender", o).value();
  void* ctx = zmq_ctx_new();
  void* router = zmq_socket(ctx, ZMQ_ROUTER);
  ASSERT_EQ(zmq_bind(router, "inproc://torn"), 0);
  void* dealer = zmq_socket(ctx, ZMQ_DEALER);
  ASSERT_EQ(zmq_connect(dealer, "inproc://torn"), 0);
  ZmqVan::Conn c(1 << 20);
  c.van = van.get();
  c.endpoint = "inproc://torn";
  std::vector<zmq_msg_t> unsent;
  Status s;
  {
    std::lock_guard<std::mutex> l(c.mu);
    OutMessage m;
    for (const char* f : {"a", "b", "c", "d"}) m.frames.push_back(Blob::FromString(f));
    m.bytes = 4;
    ASSERT_TRUE(c.outbox.Offer(&m));
    // Call 1 sends "a", call 2 is interrupted and "b" goes again (call 3),
    // call 4 fails "c".
    s = zmq_van_internal::SendFrames(dealer, &c, &m, &unsent, FailThirdCall);
    EXPECT_TRUE(c.closed) << "a torn message left its connection open";
  }
  zmq_van_internal::CloseUnsent(&unsent);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("inproc://torn"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("middle of a message"));
  EXPECT_EQ(send_calls.load(), 4);
  const int zero = 0;
  for (void* z : {router, dealer}) {
    zmq_setsockopt(z, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_close(z);
  }
  zmq_ctx_term(ctx);
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain
