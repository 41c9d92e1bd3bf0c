// ZmqVan between peers on one host: large frames through shared memory
// (in place, without a copy, the socket when the arena is full), messages
// through rings in order and taking turns with the socket, and forged
// shared-memory tables refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "transport/ps/zmq_van.h"
#include "transport/ps/zmq_van_testlib.h"
#include "net/curve.h"
#include "net/shm_ring.h"

namespace kvtrain {
namespace ps {
namespace {

using ::testing::HasSubstr;
using zmq_van_test::MakeVan;
using zmq_van_test::Pattern;
using zmq_van_test::RecvOne;
using zmq_van_test::Same;

// Peers on the same-host socket pass large frames through shared memory:
// the frames arrive whole and in place, the sender's buffer is free at once
// (copied), small frames stay in the message, and slots are reused.
TEST(ZmqVanTest, SameHostFramesGoThroughSharedMemory) {
  auto a = MakeVan("a-token");
  auto b = MakeVan("b-token");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok());
  ASSERT_FALSE(b->SameHostAddress().empty());
  ASSERT_TRUE(a->Bind(0).ok());  // a node without a same-host socket uses TCP
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, b->SameHostAddress()).ok());
  const Blob big = Pattern(300000, 1), mid = Pattern(kShmMinFrameBytes, 2),
             small = Pattern(kShmMinFrameBytes - 1, 3);
  for (int round = 0; round < 100; ++round) {
    Blob sent = Pattern(200000, round);
    ASSERT_TRUE(
        a->Send(1, 0, {Blob::FromString("head"), big, small, sent, mid, Blob()})
            .ok());
    EXPECT_EQ(sent.use_count(), 1) << "the van still holds a frame it copied";
    RawMessage got = RecvOne(b.get());
    ASSERT_TRUE(got.error.ok()) << got.error;
    EXPECT_EQ(got.token, "a-token");
    ASSERT_EQ(got.frames.size(), 6u);
    EXPECT_EQ(got.frames[0].ToString(), "head");
    EXPECT_TRUE(Same(got.frames[1], big));
    EXPECT_TRUE(Same(got.frames[2], small));
    EXPECT_TRUE(Same(got.frames[3], sent));
    EXPECT_TRUE(Same(got.frames[4], mid));
    EXPECT_EQ(got.frames[5].size(), 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got.frames[3].data()) % 64, 0u);
  }
  // Three frames a message, every one through the arena (64 MiB would hold
  // only about 130 of these messages had the slots not come back).
  EXPECT_EQ(a->shm_frames_sent(), 300);
}

// A frame written into a NewSendBuffer slot is handed over, not copied;
// the same slot sent again is copied, and buffers too small for the arena,
// or for TCP peers, are plain memory.
TEST(ZmqVanTest, SendBuffersToASameHostPeerAreHandedWithoutACopy) {
  auto a = MakeVan("a", 4 << 20, /*shm_bytes=*/1 << 20);
  auto b = MakeVan("b");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(a->Bind(0).ok());
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, b->SameHostAddress()).ok());
  auto t = MakeVan("t");
  ASSERT_TRUE(t->Bind(0).ok());
  ASSERT_TRUE(t->Connect(1, "127.0.0.1", *port, "").ok());  // TCP
  // 1 MiB holds three 300 KB slots at once: ten rounds reuse them only if
  // both sides release them.
  for (int round = 0; round < 10; ++round) {
    const Blob want = Pattern(300000, round);
    SendBuffer buf = a->NewSendBuffer(1, want.size());
    ASSERT_NE(buf.data, nullptr);
    std::memcpy(buf.data, want.data(), want.size());
    ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("head"), buf.blob}).ok());
    RawMessage got = RecvOne(b.get());
    ASSERT_TRUE(got.error.ok()) << got.error;
    ASSERT_EQ(got.frames.size(), 2u);
    EXPECT_TRUE(Same(got.frames[1], want)) << "round " << round;
    EXPECT_EQ(a->shm_frames_handed(), round + 1);
  }
  EXPECT_EQ(a->shm_frames_sent(), 10);

  // Sent twice: the second time it is copied into a slot of its own.
  const Blob want = Pattern(200000, 42);
  SendBuffer buf = a->NewSendBuffer(1, want.size());
  std::memcpy(buf.data, want.data(), want.size());
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("one"), buf.blob}).ok());
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("two"), buf.blob}).ok());
  buf = SendBuffer();
  for (int i = 0; i < 2; ++i) {
    RawMessage got = RecvOne(b.get());
    ASSERT_TRUE(got.error.ok()) << got.error;
    EXPECT_TRUE(Same(got.frames[1], want)) << got.frames[0].ToString();
  }
  EXPECT_EQ(a->shm_frames_handed(), 11);
  EXPECT_EQ(a->shm_frames_sent(), 12);

  // Plain memory: below kShmMinFrameBytes, to a TCP peer, or with no
  // connection; each still sends what was written.
  for (const auto& [van, conn, size] :
       std::vector<std::tuple<ZmqVan*, int, size_t>>{
           {a.get(), 1, kShmMinFrameBytes - 1},
           {t.get(), 1, 300000},
           {a.get(), 7, 300000}}) {
    SendBuffer plain = van->NewSendBuffer(conn, size);
    ASSERT_NE(plain.data, nullptr);
    ASSERT_EQ(plain.blob.size(), size);
    std::memset(plain.data, 3, size);
    if (conn == 7) continue;
    ASSERT_TRUE(
        van->Send(conn, 0, {Blob::FromString("plain"), plain.blob}).ok());
    RawMessage got = RecvOne(b.get());
    ASSERT_EQ(got.frames[1].size(), size);
    EXPECT_EQ(got.frames[1].data()[size - 1], 3);
  }
  EXPECT_EQ(a->shm_frames_handed(), 11);
  EXPECT_EQ(t->shm_frames_sent(), 0);
}

TEST(ZmqVanTest, AFrameTheArenaCannotHoldTakesTheSocket) {
  auto a = MakeVan("a", 4 << 20, /*shm_bytes=*/256 << 10);
  auto b = MakeVan("b");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(a->Bind(0).ok());
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, b->SameHostAddress()).ok());
  const Blob one = Pattern(200000, 4), two = Pattern(200000, 5);
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("head"), one, two}).ok());
  RawMessage got = RecvOne(b.get());
  ASSERT_TRUE(got.error.ok()) << got.error;
  ASSERT_EQ(got.frames.size(), 3u);
  EXPECT_TRUE(Same(got.frames[1], one));
  EXPECT_TRUE(Same(got.frames[2], two));
  EXPECT_EQ(a->shm_frames_sent(), 1);
  // While the receiver holds the first, the arena stays full.
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("head"), one}).ok());
  RawMessage again = RecvOne(b.get());
  EXPECT_TRUE(Same(again.frames[1], one));
  EXPECT_EQ(a->shm_frames_sent(), 1);
  got = RawMessage();
  again = RawMessage();
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("head"), one}).ok());
  EXPECT_TRUE(Same(RecvOne(b.get()).frames[1], one));
  EXPECT_EQ(a->shm_frames_sent(), 2);
}

TEST(ZmqVanTest, TcpLinksAndShmBytesZeroUseTheSocketOnly) {
  auto a = MakeVan("a");
  auto off = MakeVan("off", 4 << 20, /*shm_bytes=*/0);
  auto b = MakeVan("b");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(a->Bind(0).ok());
  ASSERT_TRUE(off->Bind(0).ok());
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, "").ok());  // TCP
  ASSERT_TRUE(off->Connect(1, "127.0.0.1", *port, b->SameHostAddress()).ok());
  const Blob big = Pattern(300000, 6);
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("tcp"), big}).ok());
  ASSERT_TRUE(off->Send(1, 0, {Blob::FromString("off"), big}).ok());
  for (int i = 0; i < 2; ++i) {
    RawMessage got = RecvOne(b.get());
    ASSERT_TRUE(got.error.ok());
    EXPECT_TRUE(Same(got.frames[1], big));
  }
  EXPECT_EQ(a->shm_frames_sent(), 0);
  EXPECT_EQ(off->shm_frames_sent(), 0);
  EXPECT_EQ(a->ring_messages_sent(), 0);
  EXPECT_EQ(off->ring_messages_sent(), 0);
}

// Between same-host peers every message goes through a ring, in order with
// those too large for it (which take the socket after a mark), with those
// that wait while the ring is full, and with another sender's.
TEST(ZmqVanTest, SameHostMessagesGoThroughARingInOrder) {
  // A 64 KiB arena: two 300 KB frames stay in the message, too large for
  // the ring's 512 KB records.
  auto a = MakeVan("a", 4 << 20, /*shm_bytes=*/64 << 10);
  auto c = MakeVan("c");
  auto b = MakeVan("b");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(a->Bind(0).ok());
  ASSERT_TRUE(c->Bind(0).ok());
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, b->SameHostAddress()).ok());
  ASSERT_TRUE(c->Connect(1, "127.0.0.1", *port, b->SameHostAddress()).ok());
  const Blob big = Pattern(300000, 7), mid = Pattern(40000, 8);
  // 3000 messages of about 1 KB fill the 1 MiB ring before b reads any.
  const std::string filler(1000, 'f');
  int sent = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<Blob> frames = {Blob::FromString(std::to_string(i)),
                                Blob::FromString(filler)};
    if (i % 500 == 7) frames = {Blob::FromString(std::to_string(i)), big, big};
    if (i % 500 == 9) frames = {Blob::FromString(std::to_string(i)), mid};
    ASSERT_TRUE(a->Send(1, 0, std::move(frames)).ok());
    ++sent;
    if (i % 100 == 0) {
      ASSERT_TRUE(c->Send(1, 0, {Blob::FromString("c" + std::to_string(i))}).ok());
    }
  }
  int next_a = 0, next_c = 0;
  while (next_a < sent || next_c < 30) {
    RawMessage got = RecvOne(b.get());
    ASSERT_TRUE(got.error.ok()) << got.error;
    ASSERT_FALSE(got.token.empty())
        << "after a's " << next_a << " and c's " << next_c;
    if (got.token == "c") {
      ASSERT_EQ(got.frames[0].ToString(), "c" + std::to_string(next_c * 100));
      ++next_c;
      continue;
    }
    ASSERT_EQ(got.token, "a");
    ASSERT_EQ(got.frames[0].ToString(), std::to_string(next_a))
        << "out of order";
    if (next_a % 500 == 7) {
      ASSERT_EQ(got.frames.size(), 3u);
      EXPECT_TRUE(Same(got.frames[1], big));
      EXPECT_TRUE(Same(got.frames[2], big));
    } else if (next_a % 500 == 9) {
      EXPECT_TRUE(Same(got.frames[1], mid));
    } else {
      EXPECT_EQ(got.frames[1].ToString(), filler);
    }
    ++next_a;
  }
  EXPECT_EQ(a->ring_messages_sent(), 3000);
  EXPECT_EQ(a->ring_messages_by_socket(), 6);
  EXPECT_EQ(c->ring_messages_sent(), 30);
  a->Flush(std::chrono::seconds(20));
  // Nothing else came.
  RawMessage none;
  StatusOr<bool> more = b->Recv(&none);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(*more);
  // And back: the receiver's own messages to a go through its ring to a.
  ASSERT_TRUE(b->Connect(1, "127.0.0.1", 0, a->SameHostAddress()).ok());
  ASSERT_TRUE(b->Send(1, 0, {Blob::FromString("back")}).ok());
  EXPECT_EQ(RecvOne(a.get()).frames[0].ToString(), "back");
  EXPECT_EQ(b->ring_messages_sent(), 1);
}

// A same-host peer that keeps its ring full cannot starve a peer on the
// socket: the two take turns.
TEST(ZmqVanTest, RingsAndTheSocketTakeTurns) {
  auto a = MakeVan("a");
  auto t = MakeVan("t");
  auto b = MakeVan("b");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(a->Bind(0).ok());
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, b->SameHostAddress()).ok());
  ASSERT_TRUE(t->Connect(1, "127.0.0.1", *port, "").ok());  // TCP
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("first")}).ok());
  EXPECT_EQ(RecvOne(b.get()).frames[0].ToString(), "first");  // the ring is up
  for (int i = 0; i < 500; ++i)
    ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("ring")}).ok());
  ASSERT_TRUE(t->Send(1, 0, {Blob::FromString("socket")}).ok());
  t->Flush(std::chrono::seconds(20));
  std::this_thread::sleep_for(
      std::chrono::milliseconds(200));  // it reached b's socket
  int at = -1;
  for (int i = 0; i < 501; ++i) {
    if (RecvOne(b.get()).token == "t") at = i;
  }
  EXPECT_GE(at, 0);
  EXPECT_LE(at, 2) << "the socket's message waited behind the ring's";
  EXPECT_EQ(a->ring_messages_sent(), 501);
}

// A socket message from a peer with a ring waits only for the records ahead
// of its mark; one that no mark announced (say from a connection the peer
// closed) is not held back for ever.
TEST(ZmqVanTest, SocketMessagesWaitOnlyForTheirMark) {
  // f's own ring is off: the test plays the ring by hand, announced over
  // the same-host socket (the only one a ring may be announced on).
  auto f = MakeVan("f", 4 << 20, 0, /*shm_ring=*/false);
  auto b = MakeVan("b");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(f->Bind(0).ok());  // a same-host socket of its own
  ASSERT_TRUE(f->Connect(1, "127.0.0.1", *port, b->SameHostAddress()).ok());
  auto ring = net::ShmRingWriter::Create();
  ASSERT_TRUE(ring.ok());
  ASSERT_TRUE(
      f->Send(1, 0,
              {Blob(), Blob::FromString(net::EncodeRingHello((*ring)->ref()))})
          .ok());
  auto record = [](const std::string& text) {
    // One frame: the count, its size, padding to 8, the frame, padding.
    std::string r(8, '\0');
    const uint32_t head[2] = {1, static_cast<uint32_t>(text.size())};
    std::memcpy(&r[0], head, sizeof(head));
    r += text;
    r.resize((r.size() + 7) / 8 * 8, '\0');
    return r;
  };
  auto write = [&](const std::string& bytes) {
    ASSERT_TRUE((*ring)->Write({{bytes.data(), bytes.size()}}));
    ASSERT_TRUE((*ring)->WakeReader().ok());
  };
  // Announced: a record, the mark, then the socket's message, sent once the
  // ring holds both; it comes after the record.
  write(record("ring 1"));
  const uint32_t mark = 0xffffffffu;
  write(std::string(reinterpret_cast<const char*>(&mark), sizeof(mark)));
  ASSERT_TRUE(f->Send(1, 0, {Blob::FromString("socket 1")}).ok());
  write(record("ring 2"));
  std::vector<std::string> order;
  for (int i = 0; i < 3; ++i)
    order.push_back(RecvOne(b.get()).frames[0].ToString());
  EXPECT_EQ(order, (std::vector<std::string>{"ring 1", "socket 1", "ring 2"}));
  // Not announced, with the ring read to the end: it comes at once.
  ASSERT_TRUE(f->Send(1, 0, {Blob::FromString("socket 2")}).ok());
  EXPECT_EQ(RecvOne(b.get()).frames[0].ToString(), "socket 2");
}

// A ring announced over TCP (from another host, or this one's) is not
// opened: only a peer on the same-host socket may name this host's memory.
TEST(ZmqVanTest, ARingAnnouncedOverTcpIsDropped) {
  auto f = MakeVan("f");
  auto b = MakeVan("b");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(f->Connect(1, "127.0.0.1", *port, "").ok());  // TCP
  auto ring = net::ShmRingWriter::Create();
  ASSERT_TRUE(ring.ok());
  ASSERT_TRUE(
      f->Send(1, 0,
              {Blob(), Blob::FromString(net::EncodeRingHello((*ring)->ref()))})
          .ok());
  const RawMessage got = RecvOne(b.get());
  EXPECT_FALSE(got.same_host);
  EXPECT_EQ(got.error.code(), Status::Code::kInvalidArgument) << got.error;
  EXPECT_NE(got.error.message().find("announced over TCP"), std::string::npos) << got.error;
  EXPECT_FALSE((*ring)->ReaderAttached()) << "the node opened a ring named over TCP";
}

TEST(ZmqVanTest, ShmRingOffUsesTheSocket) {
  auto a = MakeVan("a", 4 << 20, ZmqVanOptions().shm_bytes, /*shm_ring=*/false);
  auto b = MakeVan("b");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(a->Bind(0).ok());
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, b->SameHostAddress()).ok());
  const Blob big = Pattern(300000, 9);
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("x"), big}).ok());
  RawMessage got = RecvOne(b.get());
  ASSERT_TRUE(got.error.ok());
  EXPECT_TRUE(Same(got.frames[1], big));
  EXPECT_EQ(a->shm_frames_sent(), 1);
  EXPECT_EQ(a->ring_messages_sent(), 0);
}

// A message that starts with an empty frame must carry a table naming an
// arena of ours; anything else is an error for the receiver to report, and
// the van goes on receiving.
TEST(ZmqVanTest, ForgedSharedMemoryTablesAreErrors) {
  // Over the same-host socket (the only one tables are read from), with
  // a's own shared memory and ring off: what the test forges is sent as is.
  auto a = MakeVan("a", 4 << 20, 0, /*shm_ring=*/false);
  auto b = MakeVan("b");
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(a->Bind(0).ok());
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, b->SameHostAddress()).ok());
  net::ShmRef arena;
  arena.pid = getpid();
  arena.fd = 0;
  arena.arena_id = 42;
  arena.arena_bytes = 1000;  // not a whole number of pages
  const std::string bad_size = net::EncodeShmTable(arena, {{0, 128, 100}});
  arena.arena_bytes = 1 << 20;
  arena.fd = 100000;
  const std::string no_such_fd = net::EncodeShmTable(arena, {{0, 128, 100}});
  const std::string wrong_frame = net::EncodeShmTable(arena, {{5, 128, 100}});

  struct Forged {
    std::string table;
    Status::Code code;
    std::string says;
  };
  for (const Forged& f : std::vector<Forged>{
           {"not a table", Status::Code::kInvalidArgument,
            "no shared-memory table"},
           {bad_size, Status::Code::kInvalidArgument,
            "does not fit an arena of 1000 bytes"},
           {wrong_frame, Status::Code::kInvalidArgument, "names frame 5"},
           {no_such_fd, Status::Code::kUnavailable, "/fd/100000"}}) {
    ASSERT_TRUE(
        a->Send(1, 0, {Blob(), Blob::FromString(f.table), Blob()}).ok());
    RawMessage got = RecvOne(b.get());
    EXPECT_EQ(got.error.code(), f.code) << f.says;
    EXPECT_THAT(got.error.message(), HasSubstr(f.says));
  }

  // A ring announcement names a ring of the sender's, or the receiver
  // cannot read what follows: Unavailable (from a peer, the job fails).
  net::ShmRef ring;
  ring.pid = getpid();
  ring.fd = 100000;
  ring.arena_id = 42;
  ring.arena_bytes = 4096 + (1 << 20);
  for (const std::string& hello :
       {net::EncodeRingHello(ring), net::EncodeRingHello(ring).substr(0, 10)}) {
    ASSERT_TRUE(a->Send(1, 0, {Blob(), Blob::FromString(hello)}).ok());
    RawMessage got = RecvOne(b.get());
    EXPECT_EQ(got.error.code(), Status::Code::kUnavailable);
    EXPECT_THAT(got.error.message(), HasSubstr("ring"));
  }

  // A real ring with forged records: each is an error naming what is wrong,
  // and the ring's next record is read as usual.
  auto forged = net::ShmRingWriter::Create();
  ASSERT_TRUE(forged.ok());
  // Its own ring off: the test writes one by hand, announced over the
  // same-host socket (the only one a ring may be announced on).
  auto f = MakeVan("f", 4 << 20, 0, /*shm_ring=*/false);
  ASSERT_TRUE(f->Bind(0).ok());
  ASSERT_TRUE(f->Connect(1, "127.0.0.1", *port, b->SameHostAddress()).ok());
  ASSERT_TRUE(f->Send(1, 0,
                      {Blob(), Blob::FromString(
                                   net::EncodeRingHello((*forged)->ref()))})
                  .ok());
  const uint32_t two_frames[] = {2, 5, 1000};
  const uint32_t zero_frames[] = {0, 0};
  const uint32_t mark_with_data[] = {0xffffffffu, 7};
  struct Record {
    net::RingPieces pieces;
    std::string says;
  };
  for (const Record& r : std::vector<Record>{
           {{{"ab", 2}}, "has no frame count"},
           {{{zero_frames, sizeof(zero_frames)}},
            "does not hold the sizes of 0 frames"},
           {{{two_frames, sizeof(two_frames)}, {"\0\0\0\0hello\0\0\0", 12}},
            "ends inside frame 1"},
           {{{mark_with_data, sizeof(mark_with_data)}},
            "socket mark with data"}}) {
    ASSERT_TRUE((*forged)->Write(r.pieces));
    ASSERT_TRUE((*forged)->WakeReader().ok());
    RawMessage got = RecvOne(b.get());
    EXPECT_EQ(got.token, "f");
    EXPECT_EQ(got.error.code(), Status::Code::kInvalidArgument) << r.says;
    EXPECT_THAT(got.error.message(), HasSubstr(r.says));
  }

  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("still here")}).ok());
  RawMessage got = RecvOne(b.get());
  EXPECT_TRUE(got.error.ok());
  EXPECT_EQ(got.frames[0].ToString(), "still here");
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain
