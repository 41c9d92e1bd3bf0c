// Message encoding and validating decoding; Blob and KVPairs basics.
#include "transport/ps/message.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

#include "net/curve.h"
#include "net/pieces.h"

namespace kvtrain {
namespace ps {

Blob::Blob(std::shared_ptr<const void> owner, const void* data, size_t size)
    : owner_(std::move(owner)),
      data_(static_cast<const char*>(data)),
      size_(size) {}

Blob Blob::Copy(const void* data, size_t size) {
  // uint64 storage keeps copies 8-byte aligned.
  auto owner = std::make_shared<std::vector<uint64_t>>((size + 7) / 8);
  if (size > 0) std::memcpy(owner->data(), data, size);
  return Blob(owner, owner->data(), size);
}

SendBuffer SendBuffer::Heap(size_t size) {
  // Every byte is the caller's to write: no zeroing pass.
  std::shared_ptr<char[]> owner(new char[std::max<size_t>(size, 1)]);
  SendBuffer b;
  b.data = owner.get();
  b.blob = Blob(std::move(owner), b.data, size);
  return b;
}

Blob Blob::FromString(std::string s) {
  auto owner = std::make_shared<std::string>(std::move(s));
  return Blob(owner, owner->data(), owner->size());
}

Blob Blob::Slice(size_t offset, size_t size) const {
  CHECK_LE(offset, size_) << "Blob::Slice offset out of range";
  CHECK_LE(size, size_ - offset) << "Blob::Slice size out of range";
  return Blob(owner_, data_ + offset, size);
}

void Message::AddFrame(wire::FrameKind kind, Blob blob) {
  meta.add_data()->set_kind(kind);
  data.push_back(std::move(blob));
}

Blob Message::Frame(wire::FrameKind kind) const {
  for (int i = 0; i < meta.data_size() && i < static_cast<int>(data.size());
       ++i) {
    if (meta.data(i).kind() == kind) return data[i];
  }
  return Blob();
}

std::vector<Blob> EncodeMessage(Message* msg) {
  CHECK_EQ(msg->meta.data_size(), static_cast<int>(msg->data.size()))
      << "every data frame needs a kind";
  for (size_t i = 0; i < msg->data.size(); ++i) {
    msg->meta.mutable_data(i)->set_bytes(
        static_cast<int64_t>(msg->data[i].size()));
  }
  std::vector<Blob> frames;
  frames.reserve(msg->data.size() + 1);
  frames.push_back(Blob::FromString(msg->meta.SerializeAsString()));
  for (const Blob& b : msg->data) {
    // Receivers refuse frames above net::kMaxFrameBytes: larger data goes in
    // pieces (net/pieces.h; views of the same blob, not copies).
    const size_t n = net::PieceCount(b.size());
    if (n == 1) {
      frames.push_back(b);
      continue;
    }
    for (size_t i = 0; i < n; ++i) {
      const net::Piece p = net::PieceOf(b.size(), i);
      frames.push_back(b.Slice(p.offset, p.length));
    }
  }
  return frames;
}

Status DecodeMessage(std::vector<Blob> frames, Message* out,
                     const std::vector<bool>& in_shm) {
  if (frames.empty()) return Status::DataLoss("message has no frames");
  const Blob& head = frames[0];
  wire::Header meta;
  if (!meta.ParseFromArray(head.data(), static_cast<int>(head.size()))) {
    return Status::DataLoss("header frame (" + std::to_string(head.size()) +
                            " bytes) is not a valid header");
  }
  if (!wire::Command_IsValid(meta.command())) {
    return Status::DataLoss("unknown command " +
                            std::to_string(static_cast<int>(meta.command())));
  }
  // Each data frame the header describes arrives as one ZeroMQ frame, or
  // as consecutive pieces of at most kMaxFrameBytes that add up to its size.
  const size_t n = static_cast<size_t>(meta.data_size());
  std::vector<std::pair<size_t, size_t>> pieces(n);  // [first, end) per frame
  size_t next = 1;
  for (size_t i = 0; i < n; ++i) {
    const wire::Frame& f = meta.data(static_cast<int>(i));
    if (!wire::FrameKind_IsValid(f.kind()) ||
        f.kind() == wire::FRAME_UNSPECIFIED) {
      return Status::DataLoss("data frame " + std::to_string(i) +
                              " has unknown kind " +
                              std::to_string(static_cast<int>(f.kind())));
    }
    if (f.bytes() < 0) {
      return Status::DataLoss("data frame " + std::to_string(i) +
                              " has a negative size in the header");
    }
    const uint64_t want = static_cast<uint64_t>(f.bytes());
    uint64_t got = 0;
    const size_t first = next;
    do {
      if (next >= frames.size() && next == first) {
        return Status::DataLoss("wrong frame count: the header describes " +
                                std::to_string(n) + " data frames but " +
                                std::to_string(frames.size() - 1) + " follow");
      }
      if (next >= frames.size()) break;  // short: reported below
      got += frames[next++].size();
    } while (got < want);
    if (got != want) {
      return Status::DataLoss("data frame " + std::to_string(i) + " has " +
                              std::to_string(got) + " bytes but the header says " +
                              std::to_string(want));
    }
    if (!net::ArePieces(next - first, [&](size_t k) { return frames[first + k].size(); })) {
      return Status::DataLoss("data frame " + std::to_string(i) + " came in " +
                              std::to_string(next - first) + " pieces that are not " +
                              std::to_string(net::kPieceBytes) + " bytes each but the last");
    }
    pieces[i] = {first, next};
  }
  if (next != frames.size()) {
    return Status::DataLoss("wrong frame count: the header describes " + std::to_string(n) +
                            " data frames but " + std::to_string(frames.size() - 1) +
                            " follow");
  }
  out->meta = std::move(meta);
  out->data.clear();
  out->data.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto [first, end] = pieces[i];
    if (end - first > 1) {
      // Joined into one aligned buffer (8-byte aligned: new's alignment).
      auto joined = std::shared_ptr<char[]>(new char[static_cast<size_t>(out->meta.data(static_cast<int>(i)).bytes())]);
      size_t off = 0;
      for (size_t k = first; k < end; ++k) {
        if (frames[k].size() > 0) std::memcpy(joined.get() + off, frames[k].data(), frames[k].size());
        off += frames[k].size();
      }
      out->data.push_back(Blob(joined, joined.get(), off));
      continue;
    }
    Blob& b = frames[first];
    const bool shared = first < in_shm.size() && in_shm[first] &&
                        out->meta.data(static_cast<int>(i)).kind() != wire::VALUES;
    if (shared || reinterpret_cast<uintptr_t>(b.data()) % 8 != 0) {
      out->data.push_back(Blob::Copy(b.data(), b.size()));
    } else {
      out->data.push_back(std::move(b));
    }
  }
  return Status::OK();
}

Status StatusFromWire(int code, const std::string& message) {
  using C = Status::Code;
  switch (static_cast<C>(code)) {
    case C::kOk:
      return Status::OK();
    case C::kInvalidArgument:
      return Status::InvalidArgument(message);
    case C::kNotFound:
      return Status::NotFound(message);
    case C::kUnavailable:
      return Status::Unavailable(message);
    case C::kDeadlineExceeded:
      return Status::DeadlineExceeded(message);
    case C::kInternal:
      return Status::Internal(message);
    case C::kAlreadyExists:
      return Status::AlreadyExists(message);
    case C::kFailedPrecondition:
      return Status::FailedPrecondition(message);
    case C::kDataLoss:
      return Status::DataLoss(message);
    case C::kAborted:
      return Status::Aborted(message);
  }
  return Status::Internal(message + " (unknown status code " +
                          std::to_string(code) + ")");
}

wire::Role ToWireRole(Role role) {
  switch (role) {
    case Role::kScheduler:
      return wire::SCHEDULER;
    case Role::kServer:
      return wire::SERVER;
    case Role::kWorker:
      return wire::WORKER;
  }
  return wire::ROLE_UNSPECIFIED;
}

bool FromWireRole(wire::Role role, Role* out) {
  switch (role) {
    case wire::SCHEDULER:
      *out = Role::kScheduler;
      return true;
    case wire::SERVER:
      *out = Role::kServer;
      return true;
    case wire::WORKER:
      *out = Role::kWorker;
      return true;
    default:
      return false;
  }
}

std::string DescribeData(const Message& msg) {
  const wire::Header& h = msg.meta;
  std::ostringstream os;
  os << (h.push() ? (h.pull() ? "push+pull" : "push")
                  : (h.pull() ? "pull" : "command"))
     << (h.request() ? " request" : " response") << " ts=" << h.timestamp()
     << " app=" << h.app_id();
  if (h.head() != 0) os << " head=" << h.head();
  const Blob keys = msg.Frame(wire::KEYS);
  const size_t nk = keys.count<uint64_t>();
  os << " keys=" << nk;
  if (nk > 0) {
    os << " [" << keys.as<uint64_t>()[0];
    if (nk > 1) os << ".." << keys.as<uint64_t>()[nk - 1];
    os << "]";
  }
  size_t bytes = 0;
  for (const Blob& b : msg.data) bytes += b.size();
  os << " bytes=" << bytes;
  if (h.status_code() != 0) os << " error=\"" << h.status_message() << "\"";
  return os.str();
}

std::string PrintableToken(const std::string& token) {
  std::string out;
  for (unsigned char c : token) {
    if (c >= 0x21 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out.empty() ? "(empty)" : out;
}

}  // namespace ps
}  // namespace kvtrain
