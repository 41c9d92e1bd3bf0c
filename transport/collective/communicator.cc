// Communicator: point-to-point messages and the collectives over the Mesh.
#include "transport/collective/communicator.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "transport/collective/mesh.h"

namespace kvtrain {
namespace collective {

namespace {

using TimePoint = std::chrono::steady_clock::time_point;

// One rank's share of a ring all-reduce: [offset, offset + count).
struct Segment {
  size_t offset = 0;
  size_t count = 0;
};

std::vector<Segment> Segments(size_t count, int n) {
  std::vector<Segment> segs(n);
  const size_t base = count / n, extra = count % n;
  size_t off = 0;
  for (int i = 0; i < n; ++i) {
    segs[i].offset = off;
    segs[i].count = base + (static_cast<size_t>(i) < extra ? 1 : 0);
    off += segs[i].count;
  }
  return segs;
}

void AddInto(float* __restrict dst, const float* __restrict src, size_t n) {
  // A body whose length is a multiple of 8 lets GCC's -O2 (cheap cost
  // model) vectorise it; the loop over all n stays scalar there.
  const size_t body = n & ~size_t{7};
  for (size_t i = 0; i < body; ++i) dst[i] += src[i];
  for (size_t i = body; i < n; ++i) dst[i] += src[i];
}

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 29;
  return x;
}

}  // namespace

Communicator::Communicator(std::shared_ptr<Mesh> mesh, uint64_t group,
                           std::vector<int> members, int rank,
                           const CommunicatorOptions& options)
    : mesh_(std::move(mesh)),
      group_(group),
      members_(std::move(members)),
      rank_(rank),
      options_(options) {}

Communicator::~Communicator() {
  // Later messages of this sub-group are strays; the world group stays.
  if (group_ != kWorldGroup) mesh_->CloseGroup(group_);
}

uint64_t Communicator::NextSeq() {
  mesh_->Retire(group_, seq_);
  return seq_++;
}

void Communicator::Close() { mesh_->Close(); }

std::string Communicator::PeerName(int peer) const {
  if (peer < 0 || peer >= size()) return "rank " + std::to_string(peer);
  std::string name = mesh_->PeerName(members_[peer]);
  if (members_[peer] != peer) {
    // A sub-group: say both ranks.
    name = "rank " + std::to_string(peer) + " of the sub-group, world " + name;
  }
  return name;
}

std::string Communicator::Transport(int peer) const {
  return mesh_->Transport(members_[peer]);
}

Status Communicator::Send(int peer, uint64_t tag, const void* data,
                          size_t size) {
  if (peer < 0 || peer >= this->size() || peer == rank_) {
    return Status::InvalidArgument(
        "Send from rank " + std::to_string(rank_) + " to invalid peer " +
        std::to_string(peer) + " (group of " + std::to_string(this->size()) +
        ")");
  }
  return mesh_->Send(members_[peer], MsgKind::kUser, group_, tag, data, size)
      .Annotate("Send tag " + std::to_string(tag));
}

Status Communicator::RecvPiece(int peer, uint64_t tag, size_t bytes,
                               TimePoint deadline, const char* what,
                               void* copy_to, float* add_to,
                               bool wait_released) {
  const bool user = std::strcmp(what, "Recv") == 0;
  auto got = mesh_->Recv(members_[peer], user ? MsgKind::kUser : MsgKind::kCollective,
                         group_, tag, deadline);
  if (!got.ok()) {
    return got.status().Annotate(std::string(what) + " on rank " +
                                 std::to_string(rank_) + " from " +
                                 PeerName(peer) + ", tag " +
                                 std::to_string(tag));
  }
  const Payload& p = **got;
  if (p.size() != bytes) {
    return Status::InvalidArgument(
        std::string(what) + " on rank " + std::to_string(rank_) + ": " +
        PeerName(peer) + " sent " + std::to_string(p.size()) +
        " bytes under tag " + std::to_string(tag) + ", expected " +
        std::to_string(bytes) +
        (user ? "" : " (do all ranks call the same collectives with the same "
                     "sizes?)"));
  }
  // The destination was sent zero-copy: ZeroMQ must be done with it first.
  if (wait_released) KV_RETURN_IF_ERROR(mesh_->WaitReleased(deadline));
  if (add_to != nullptr) {
    AddInto(add_to, reinterpret_cast<const float*>(p.data()), bytes / 4);
  } else if (bytes > 0) {
    std::memcpy(copy_to, p.data(), bytes);
  }
  return Status::OK();
}

Status Communicator::Recv(int peer, uint64_t tag, void* data, size_t size,
                          Duration timeout) {
  if (peer < 0 || peer >= this->size() || peer == rank_) {
    return Status::InvalidArgument(
        "Recv on rank " + std::to_string(rank_) + " from invalid peer " +
        std::to_string(peer) + " (group of " + std::to_string(this->size()) +
        ")");
  }
  return RecvPiece(peer, tag, size, std::chrono::steady_clock::now() + timeout,
                   "Recv", data, nullptr);
}

// Ring: rank r sends to r+1 and receives from r-1. Reduce-scatter: at step
// s rank r sends segment r-s and adds the received segment r-s-1; after
// n-1 steps segment r+1 is complete on rank r. All-gather then passes the
// complete segments around. Pieces are forwarded as soon as they are
// ready, so one segment streams through the ring.
Status Communicator::RingAllReduce(float* data, size_t count, uint64_t tag) {
  const int n = size();
  const int next = (rank_ + 1) % n, prev = (rank_ + n - 1) % n;
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  const std::vector<Segment> segs = Segments(count, n);
  const size_t piece = std::max<size_t>(1, options_.piece_bytes / sizeof(float));
  auto seg_of = [n](int i) { return ((i % n) + n) % n; };
  auto send_seg = [&](const Segment& s) -> Status {
    for (size_t o = 0; o < s.count; o += piece) {
      const size_t c = std::min(piece, s.count - o);
      KV_RETURN_IF_ERROR(mesh_->Send(members_[next], MsgKind::kCollective,
                                     group_, tag, data + s.offset + o,
                                     c * sizeof(float), /*copy=*/false)
                             .Annotate("all-reduce on rank " +
                                       std::to_string(rank_) + " to " +
                                       PeerName(next)));
    }
    return Status::OK();
  };
  // Reduce-scatter, forwarding each reduced piece at once.
  KV_RETURN_IF_ERROR(send_seg(segs[seg_of(rank_)]));
  for (int s = 0; s < n - 1; ++s) {
    const Segment& in = segs[seg_of(rank_ - s - 1)];
    for (size_t o = 0; o < in.count; o += piece) {
      const size_t c = std::min(piece, in.count - o);
      float* at = data + in.offset + o;
      KV_RETURN_IF_ERROR(RecvPiece(prev, tag, c * sizeof(float), deadline,
                                   "all-reduce", nullptr, at));
      if (s + 1 < n - 1) {
        KV_RETURN_IF_ERROR(mesh_->Send(members_[next], MsgKind::kCollective,
                                       group_, tag, at, c * sizeof(float),
                                       /*copy=*/false));
      }
    }
  }
  // Segments received below were sent zero-copy above: ZeroMQ must be done
  // with them before they are overwritten.
  KV_RETURN_IF_ERROR(mesh_->WaitReleased(deadline));
  KV_RETURN_IF_ERROR(send_seg(segs[seg_of(rank_ + 1)]));
  for (int s = 0; s < n - 1; ++s) {
    const Segment& in = segs[seg_of(rank_ - s)];
    for (size_t o = 0; o < in.count; o += piece) {
      const size_t c = std::min(piece, in.count - o);
      float* at = data + in.offset + o;
      KV_RETURN_IF_ERROR(RecvPiece(prev, tag, c * sizeof(float), deadline,
                                   "all-reduce", at, nullptr));
      if (s + 1 < n - 1) {
        KV_RETURN_IF_ERROR(mesh_->Send(members_[next], MsgKind::kCollective,
                                       group_, tag, at, c * sizeof(float),
                                       /*copy=*/false));
      }
    }
  }
  return mesh_->WaitReleased(deadline);
}

// Recursive doubling: at round k rank r swaps its whole tensor with rank
// r ^ 2^k and adds. Every rank ends with the same bits: float addition is
// commutative, and after each round both partners hold the same sum.
Status Communicator::DoublingAllReduce(float* data, size_t count, uint64_t tag) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  const size_t bytes = count * sizeof(float);
  for (int mask = 1; mask < size(); mask <<= 1) {
    const int partner = rank_ ^ mask;
    KV_RETURN_IF_ERROR(mesh_->Send(members_[partner], MsgKind::kCollective, group_,
                                   tag, data, bytes, /*copy=*/false)
                           .Annotate("all-reduce on rank " + std::to_string(rank_) +
                                     " to " + PeerName(partner)));
    KV_RETURN_IF_ERROR(RecvPiece(partner, tag, bytes, deadline, "all-reduce", nullptr,
                                 data, /*wait_released=*/true));
  }
  return Status::OK();
}

Status Communicator::AllReduceSum(float* data, size_t count) {
  std::lock_guard<std::mutex> l(coll_mu_);
  const uint64_t tag = NextSeq();
  if (size() == 1 || count == 0) return Status::OK();
  const bool power_of_two = (size() & (size() - 1)) == 0;
  if (power_of_two && count * sizeof(float) <= options_.doubling_bytes) {
    return DoublingAllReduce(data, count, tag);
  }
  return RingAllReduce(data, count, tag);
}

Status Communicator::AllGather(const void* mine, size_t bytes, void* all) {
  std::lock_guard<std::mutex> l(coll_mu_);
  const uint64_t tag = NextSeq();
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  char* out = static_cast<char*>(all);
  if (bytes > 0) std::memcpy(out + static_cast<size_t>(rank_) * bytes, mine, bytes);
  if (size() == 1) return Status::OK();
  // Everyone sends its block to everyone: for the small (compressed) blocks
  // this serves, one hop beats a ring's size() - 1.
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    KV_RETURN_IF_ERROR(mesh_->Send(members_[p], MsgKind::kCollective, group_, tag, mine, bytes,
                                   /*copy=*/false)
                           .Annotate("all-gather on rank " + std::to_string(rank_) + " to " +
                                     PeerName(p)));
  }
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    KV_RETURN_IF_ERROR(RecvPiece(p, tag, bytes, deadline, "all-gather",
                                 out + static_cast<size_t>(p) * bytes, nullptr));
  }
  return mesh_->WaitReleased(deadline);
}

Status Communicator::Barrier() {
  std::lock_guard<std::mutex> l(coll_mu_);
  const uint64_t tag = NextSeq();
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    KV_RETURN_IF_ERROR(
        mesh_->Send(members_[p], MsgKind::kCollective, group_, tag, "", 0)
            .Annotate("barrier"));
  }
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    KV_RETURN_IF_ERROR(RecvPiece(p, tag, 0, deadline, "barrier", nullptr, nullptr));
  }
  return Status::OK();
}

Status Communicator::Broadcast(int root, void* data, size_t size) {
  if (root < 0 || root >= this->size()) {
    return Status::InvalidArgument("broadcast from invalid root " +
                                   std::to_string(root) + " (group of " +
                                   std::to_string(this->size()) + ")");
  }
  std::lock_guard<std::mutex> l(coll_mu_);
  const uint64_t tag = NextSeq();
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  if (rank_ != root) {
    return RecvPiece(root, tag, size, deadline, "broadcast", data, nullptr);
  }
  for (int p = 0; p < this->size(); ++p) {
    if (p == rank_) continue;
    KV_RETURN_IF_ERROR(mesh_->Send(members_[p], MsgKind::kCollective, group_,
                                   tag, data, size, /*copy=*/false)
                           .Annotate("broadcast"));
  }
  return mesh_->WaitReleased(deadline);
}

StatusOr<std::shared_ptr<Communicator>> Communicator::Split(int color,
                                                            int key) {
  std::lock_guard<std::mutex> l(coll_mu_);
  const uint64_t tag = NextSeq();
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  // The sub-group this rank joins; a peer that has its answer may send in
  // it before this rank has everyone's, so it is open (to this group's
  // ranks) from now on. 0 and kWorldGroup are taken.
  uint64_t group = Mix(Mix(group_, tag), static_cast<uint64_t>(color));
  if (group <= kWorldGroup) group += 2;
  if (color >= 0) mesh_->OpenGroup(group, members_);
  // All-gather (color, key) by sending to everyone.
  std::vector<int32_t> mine = {color, key};
  std::vector<std::vector<int32_t>> all(size(), std::vector<int32_t>(2));
  all[rank_] = mine;
  Status gathered = [&]() -> Status {
    for (int p = 0; p < size(); ++p) {
      if (p == rank_) continue;
      KV_RETURN_IF_ERROR(mesh_->Send(members_[p], MsgKind::kCollective, group_,
                                     tag, mine.data(), 8)
                             .Annotate("split"));
    }
    for (int p = 0; p < size(); ++p) {
      if (p == rank_) continue;
      KV_RETURN_IF_ERROR(RecvPiece(p, tag, 8, deadline, "split", all[p].data(), nullptr));
    }
    return Status::OK();
  }();
  if (!gathered.ok()) {
    if (color >= 0) mesh_->CloseGroup(group);
    return gathered;
  }
  if (color < 0) return std::shared_ptr<Communicator>();
  std::vector<std::pair<std::pair<int, int>, int>> order;  // ((key, rank), rank)
  for (int p = 0; p < size(); ++p) {
    if (all[p][0] == color) order.push_back({{all[p][1], p}, p});
  }
  std::sort(order.begin(), order.end());
  std::vector<int> members;
  int new_rank = -1;
  for (const auto& o : order) {
    if (o.second == rank_) new_rank = static_cast<int>(members.size());
    members.push_back(members_[o.second]);
  }
  mesh_->OpenGroup(group, members);
  return std::shared_ptr<Communicator>(
      new Communicator(mesh_, group, std::move(members), new_rank, options_));
}

}  // namespace collective
}  // namespace kvtrain
