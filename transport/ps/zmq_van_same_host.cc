// ZmqVan on one host: messages through shared-memory rings
// (net/shm_ring.h): sending, the receive side's announcements, marks and
// records, and the counters; and large frames placed in shared-memory
// arenas (net/shm.h) and taken from them.
#include <glog/logging.h>

#include <cstring>

#include "transport/ps/zmq_van_conn.h"

namespace kvtrain {
namespace ps {
namespace {

// A ring record: the frame count, each frame's size (u32 each), then the
// frames, each starting 8-byte aligned (as the values a receiver reads in
// place must). A count of kSocketMark: the sender's next message comes over
// the socket (it was too large for the ring).
constexpr uint32_t kSocketMark = 0xffffffffu;
constexpr size_t kMaxRingFrames = 1024;
constexpr char kZeros[8] = {};
size_t Pad8(size_t n) { return (8 - n % 8) % 8; }

}  // namespace

namespace zmq_van_internal {

bool StartRing(ZmqVan::Conn* c, std::vector<zmq_msg_t>* unsent) {
  StatusOr<std::unique_ptr<net::ShmRingWriter>> ring =
      net::ShmRingWriter::Create();
  if (!ring.ok()) {
    LOG(WARNING) << "no shared-memory ring for " << c->endpoint << " ("
                 << ring.status().message()
                 << "); its messages go through the socket";
    return false;
  }
  // The announcement goes first, over the socket: the receiver reads the
  // ring only once it has it.
  OutMessage hello;
  hello.frames.emplace_back();
  hello.frames.push_back(
      Blob::FromString(net::EncodeRingHello((*ring)->ref())));
  hello.bytes = static_cast<int64_t>(hello.frames[1].size());
  if (c->outbox.Offer(&hello)) {
    Status s = SendFrames(c->socket, c, &hello, unsent);
    if (!s.ok()) {
      LOG(WARNING) << s << "; messages to " << c->endpoint
                   << " go through the socket";
      return false;
    }
  }
  c->ring = std::move(*ring);
  return true;
}

bool RingSend(ZmqVan::Conn* c, OutMessage* m, std::vector<zmq_msg_t>* unsent) {
  const size_t n = m->frames.size();
  std::vector<uint32_t> head;
  head.reserve(n + 1);
  head.push_back(static_cast<uint32_t>(n));
  size_t bytes = sizeof(uint32_t) * (n + 1);
  bytes += Pad8(bytes);
  for (const Blob& b : m->frames) {
    head.push_back(static_cast<uint32_t>(b.size()));
    bytes += b.size() + Pad8(b.size());
  }
  bool sent;
  const bool by_socket = n > kMaxRingFrames || bytes > c->ring->max_record();
  if (by_socket) {
    const uint32_t mark = kSocketMark;
    sent = c->ring->Write({{&mark, sizeof(mark)}});
  } else {
    net::RingPieces pieces;
    pieces.reserve(2 * n + 2);
    pieces.emplace_back(head.data(), head.size() * sizeof(uint32_t));
    pieces.emplace_back(kZeros, Pad8(head.size() * sizeof(uint32_t)));
    for (const Blob& b : m->frames) {
      pieces.emplace_back(b.data(), b.size());
      pieces.emplace_back(kZeros, Pad8(b.size()));
    }
    sent = c->ring->Write(pieces);
  }
  if (!sent) return false;
  ++c->ring_sent;
  if (by_socket) ++c->ring_by_socket;
  Status woke = c->ring->WakeReader();
  if (!woke.ok() && !c->bell_failed) {
    c->bell_failed = true;
    LOG(WARNING) << woke << " (messages to " << c->endpoint
                 << " are taken at the receiver's next poll)";
  }
  if (by_socket && c->outbox.Offer(m)) {
    Status s = SendFrames(c->socket, c, m, unsent);
    LOG_IF(WARNING, !s.ok()) << s;
  }
  return true;
}

}  // namespace zmq_van_internal

bool ZmqVan::OnSocketMessage(RawMessage* msg) {
  if (OnLaneControl(*msg)) return true;
  if (msg->error.ok() && msg->frames.size() == 2 && msg->frames[0].empty() &&
      net::IsRingHello(msg->frames[1].data(), msg->frames[1].size())) {
    net::ShmRef ref;
    Status status = net::DecodeRingHello(msg->frames[1].data(),
                                         msg->frames[1].size(), &ref);
    if (!msg->same_host) {
      // Only a peer on the same-host socket may name this host's memory:
      // dropped, as any malformed message.
      msg->frames.clear();
      msg->error = Status::InvalidArgument(
          "a shared-memory ring announced over TCP: only a peer on the "
          "same-host socket may announce one");
      return false;
    }
    if (status.ok() && same_host_.empty()) {
      status = Status::Unavailable(
          "a ring announced to a node without a same-host socket");
    }
    std::unique_ptr<net::ShmRingReader> reader;
    if (status.ok()) {
      StatusOr<std::unique_ptr<net::ShmRingReader>> opened =
          net::ShmRingReader::Open(ref, bell_write_);
      if (opened.ok()) {
        reader = std::move(*opened);
      } else {
        status = opened.status();
      }
    }
    if (!status.ok()) {
      // The peer's messages will be in that ring: the job cannot go on
      // without them (a connection that is no peer's is only dropped).
      msg->frames.clear();
      msg->error = Status::Unavailable(status.message());
      return false;
    }
    // The same peer connected again: what its old ring still holds goes
    // first, in order.
    for (size_t i = 0; i < rings_.size(); ++i) {
      if (rings_[i].token != msg->token) continue;
      RingIn old = std::move(rings_[i]);
      rings_.erase(rings_.begin() + static_cast<std::ptrdiff_t>(i));
      for (;;) {
        StatusOr<bool> got = old.reader->Read(&record_);
        if (!got.ok() || !*got) break;
        RawMessage m;
        m.token = old.token;
        m.error = DecodeRecord(std::move(record_), &m);
        if (m.frames.empty() && m.error.ok()) {  // a mark
          if (!old.early.empty()) {
            ready_msgs_.push_back(std::move(old.early.front()));
            old.early.pop_front();
          }
          continue;
        }
        ready_msgs_.push_back(std::move(m));
      }
      for (RawMessage& m : old.early) ready_msgs_.push_back(std::move(m));
      break;
    }
    rings_.push_back(RingIn{msg->token, std::move(reader), 0, {}});
    return true;
  }
  for (RingIn& in : rings_) {
    if (in.token != msg->token) continue;
    if (in.marks > 0) {
      --in.marks;
      return false;
    }
    // Its mark went into the ring before it was sent: while the ring holds
    // unread records, the mark may be among them, and the message waits for
    // the ones ahead of it. With none, no mark announced it (a connection
    // the peer closed): it is let through.
    if (!in.early.empty() || in.reader->HasRecord()) {
      in.early.push_back(std::move(*msg));
      return true;
    }
    return false;
  }
  return false;
}

Status ZmqVan::DecodeRecord(std::vector<char>&& record, RawMessage* msg) {
  msg->frames.clear();
  const size_t total = record.size();
  auto bad = [total](const std::string& what) {
    return Status::InvalidArgument("a shared-memory ring record of " +
                                   std::to_string(total) + " bytes " + what);
  };
  if (record.size() < sizeof(uint32_t)) return bad("has no frame count");
  uint32_t n;
  std::memcpy(&n, record.data(), sizeof(n));
  if (n == kSocketMark) {
    return record.size() == sizeof(n) ? Status::OK()
                                      : bad("is a socket mark with data");
  }
  const size_t table = sizeof(uint32_t) * (static_cast<size_t>(n) + 1);
  if (n == 0 || n > kMaxRingFrames || total < table + Pad8(table)) {
    return bad("does not hold the sizes of " + std::to_string(n) + " frames");
  }
  // The record (copied out of the ring) outlives the ring's slot; the
  // frames point into it.
  auto owner = std::make_shared<std::vector<char>>(std::move(record));
  size_t at = table + Pad8(table);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t size;
    std::memcpy(&size, owner->data() + sizeof(uint32_t) * (i + 1),
                sizeof(size));
    if (at > owner->size() || size > owner->size() - at ||
        Pad8(size) > owner->size() - at - size) {
      return bad("ends inside frame " + std::to_string(i));
    }
    msg->frames.emplace_back(owner, owner->data() + at, size);
    at += size + Pad8(size);
  }
  if (at != owner->size()) return bad("has bytes after its frames");
  if (msg->frames.size() >= 2 && msg->frames[0].empty())
    return TakeShmFrames(msg);
  return Status::OK();
}

StatusOr<bool> ZmqVan::RecvRing(RawMessage* msg) {
  for (size_t k = 0; k < rings_.size(); ++k) {
    const size_t i = (ring_next_ + k) % rings_.size();
    RingIn& in = rings_[i];
    while (in.marks == 0) {
      StatusOr<bool> got = in.reader->Read(&record_);
      if (!got.ok()) {
        // The ring cannot be read past this point: fail loudly, naming the
        // peer.
        msg->token = in.token;
        msg->frames.clear();
        msg->error = Status::Unavailable(got.status().message());
        rings_.erase(rings_.begin() + static_cast<std::ptrdiff_t>(i));
        return true;
      }
      if (!*got) {
        // Read to the end without a mark for them: held socket messages
        // were not announced by this ring (see OnSocketMessage).
        if (!in.early.empty()) {
          for (RawMessage& m : in.early) ready_msgs_.push_back(std::move(m));
          in.early.clear();
        }
        break;
      }
      msg->token = in.token;
      msg->error = DecodeRecord(std::move(record_), msg);
      if (msg->frames.empty() && msg->error.ok()) {
        // A mark: the next message is the socket's.
        if (in.early.empty()) {
          ++in.marks;
          break;
        }
        *msg = std::move(in.early.front());
        in.early.pop_front();
      }
      ring_next_ = i + 1;
      return true;
    }
  }
  // Rings whose writer closed them and that are read to the end go; socket
  // messages that came after them are next.
  for (size_t i = 0; i < rings_.size();) {
    if (rings_[i].marks == 0 && rings_[i].reader->Finished()) {
      for (RawMessage& m : rings_[i].early) ready_msgs_.push_back(std::move(m));
      rings_.erase(rings_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return false;
}

int64_t ZmqVan::SumOverConns(int64_t (*count)(const Conn& c)) {
  std::lock_guard<std::mutex> lock(conns_mu_);
  int64_t n = 0;
  for (auto& c : all_conns_) {
    std::lock_guard<std::mutex> l(c->mu);
    n += count(*c);
  }
  return n;
}

int64_t ZmqVan::ring_messages_sent() {
  return SumOverConns([](const Conn& c)
                          NO_THREAD_SAFETY_ANALYSIS { return c.ring_sent; });
}

int64_t ZmqVan::ring_messages_by_socket() {
  return SumOverConns(
      [](const Conn& c) NO_THREAD_SAFETY_ANALYSIS { return c.ring_by_socket; });
}

bool ZmqVan::EnsureArena(Conn* c) {
  if (c->shm != nullptr) return true;
  if (c->shm_failed) return false;
  StatusOr<std::unique_ptr<net::ShmArena>> a =
      net::ShmArena::Create(static_cast<uint64_t>(options_.shm_bytes));
  if (!a.ok()) {
    c->shm_failed = true;
    LOG(WARNING) << "no shared memory for " << c->endpoint << " ("
                 << a.status().message()
                 << "); its frames go through the socket";
    return false;
  }
  c->shm = std::move(*a);
  return true;
}

SendBuffer ZmqVan::NewSendBuffer(int conn, size_t size) {
  Conn* c = size >= kShmMinFrameBytes &&
                    size <= static_cast<size_t>(net::kMaxFramePayloadBytes)
                ? FindConn(conn)
                : nullptr;
  if (c != nullptr && c->shm_ok) {
    std::lock_guard<std::mutex> l(c->mu);
    net::ShmReserved slot;
    if (!c->closed && EnsureArena(c) && c->shm->Reserve(size, &slot)) {
      SendBuffer b;
      b.data = slot.data;
      b.blob = Blob(std::move(slot.owner), slot.data, size);
      return b;
    }
  }
  return SendBuffer::Heap(size);
}

void ZmqVan::PlaceInShm(Conn* c, OutMessage* m) {
  net::ShmRef arena;
  std::vector<net::ShmPlaced> placed;
  for (size_t i = 0; i < m->frames.size(); ++i) {
    Blob& b = m->frames[i];
    if (b.size() < kShmMinFrameBytes) continue;
    if (!EnsureArena(c)) return;
    net::ShmRef ref;
    // A frame written into one of the arena's slots (NewSendBuffer) is
    // handed over as it is; any other is copied in, or, with the arena
    // full, goes through the socket.
    if (c->shm->Hand(b.data(), b.size(), &ref)) {
      ++shm_frames_handed_;
    } else if (!c->shm->Put(b.data(), b.size(), &ref)) {
      continue;
    }
    arena = ref;
    placed.push_back({static_cast<uint32_t>(i), ref.offset, ref.size});
    b = Blob();
  }
  if (placed.empty()) return;
  std::vector<Blob> frames;
  frames.reserve(m->frames.size() + 2);
  frames.emplace_back();
  frames.push_back(Blob::FromString(net::EncodeShmTable(arena, placed)));
  for (Blob& b : m->frames) frames.push_back(std::move(b));
  m->frames = std::move(frames);
  m->bytes = 0;
  for (const Blob& b : m->frames) m->bytes += static_cast<int64_t>(b.size());
  shm_frames_sent_ += static_cast<int64_t>(placed.size());
}

Status ZmqVan::TakeShmFrames(RawMessage* msg) {
  std::vector<Blob>* frames = &msg->frames;
  net::ShmRef arena;
  std::vector<net::ShmPlaced> placed;
  KV_RETURN_IF_ERROR(net::DecodeShmTable((*frames)[1].data(),
                                         (*frames)[1].size(), &arena, &placed));
  frames->erase(frames->begin(), frames->begin() + 2);
  msg->in_shm.assign(frames->size(), false);
  for (const net::ShmPlaced& p : placed) {
    if (p.frame >= frames->size() || !(*frames)[p.frame].empty()) {
      return Status::InvalidArgument(
          "shared-memory table names frame " + std::to_string(p.frame) +
          ", which is not an empty frame of " + std::to_string(frames->size()));
    }
    net::ShmRef ref = arena;
    ref.offset = p.offset;
    ref.size = p.size;
    KV_ASSIGN_OR_RETURN(net::ShmMaps::View v, shm_maps_.Open(ref));
    (*frames)[p.frame] = Blob(std::move(v.owner), v.data, v.size);
    msg->in_shm[p.frame] = true;
  }
  return Status::OK();
}

}  // namespace ps
}  // namespace kvtrain
