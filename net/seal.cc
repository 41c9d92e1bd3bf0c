#include "net/seal.h"

#include <glog/logging.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <climits>
#include <cstring>

namespace kvtrain {
namespace net {
namespace {

constexpr char kMagic[4] = {'k', 'v', 'S', 'L'};

// Layout: magic[4] kind[1] dir[1] part[2] lane[8] seq[8] size[8].
void EncodeHeader(const SealHeader& h, char* out) {
  std::memcpy(out, kMagic, 4);
  out[4] = static_cast<char>(h.kind);
  out[5] = static_cast<char>(h.dir);
  out[6] = static_cast<char>(h.part & 0xFF);
  out[7] = static_cast<char>(h.part >> 8);
  StoreLe64(out + 8, h.lane);
  StoreLe64(out + 16, h.seq);
  StoreLe64(out + 24, h.size);
}

// The 96-bit nonce: direction, then the sequence number.
void Nonce(const SealHeader& h, unsigned char out[12]) {
  std::memset(out, 0, 12);
  out[0] = static_cast<unsigned char>(h.dir);
  for (int i = 0; i < 8; ++i)
    out[4 + i] = static_cast<unsigned char>(h.seq >> (8 * i));
}

}  // namespace

bool PeekSealed(const char* data, size_t size, SealHeader* header) {
  if (size < kSealHeaderBytes + kSealTagBytes) return false;
  if (std::memcmp(data, kMagic, 4) != 0) return false;
  const auto kind = static_cast<uint8_t>(data[4]);
  const auto dir = static_cast<uint8_t>(data[5]);
  if (kind < 1 || kind > 4 || dir < 1 || dir > 2) return false;
  SealHeader h;
  h.kind = static_cast<SealKind>(kind);
  h.dir = static_cast<SealDir>(dir);
  h.part = static_cast<uint16_t>(static_cast<unsigned char>(data[6]) |
                                 (static_cast<unsigned char>(data[7]) << 8));
  h.lane = LoadLe64(data + 8);
  h.seq = LoadLe64(data + 16);
  h.size = LoadLe64(data + 24);
  if (h.size != size - kSealHeaderBytes - kSealTagBytes) return false;
  *header = h;
  return true;
}

struct Sealer::Impl {
  EVP_CIPHER_CTX* enc = nullptr;
  EVP_CIPHER_CTX* dec = nullptr;
  ~Impl() {
    EVP_CIPHER_CTX_free(enc);
    EVP_CIPHER_CTX_free(dec);
  }
};

Sealer::Sealer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Sealer::~Sealer() = default;

StatusOr<std::unique_ptr<Sealer>> Sealer::Create(const std::string& key) {
  if (key.size() != kSealKeyBytes) {
    return Status::InvalidArgument("a lane key has " +
                                   std::to_string(kSealKeyBytes) +
                                   " bytes, not " + std::to_string(key.size()));
  }
  auto impl = std::make_unique<Impl>();
  impl->enc = EVP_CIPHER_CTX_new();
  impl->dec = EVP_CIPHER_CTX_new();
  const auto* k = reinterpret_cast<const unsigned char*>(key.data());
  if (impl->enc == nullptr || impl->dec == nullptr ||
      EVP_EncryptInit_ex(impl->enc, EVP_aes_256_gcm(), nullptr, k, nullptr) !=
          1 ||
      EVP_DecryptInit_ex(impl->dec, EVP_aes_256_gcm(), nullptr, k, nullptr) !=
          1) {
    return Status::Internal("libcrypto cannot set up AES-256-GCM");
  }
  return std::unique_ptr<Sealer>(new Sealer(std::move(impl)));
}

Status Sealer::Seal(const SealHeader& header, const void* payload, char* out) {
  if (header.size > static_cast<uint64_t>(INT_MAX)) {
    return Status::InvalidArgument("a sealed frame holds at most 2 GiB");
  }
  EncodeHeader(header, out);
  unsigned char iv[12];
  Nonce(header, iv);
  EVP_CIPHER_CTX* c = impl_->enc;
  auto* body = reinterpret_cast<unsigned char*>(out + kSealHeaderBytes);
  int len = 0;
  const int n = static_cast<int>(header.size);
  if (EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, iv) != 1 ||
      EVP_EncryptUpdate(c, nullptr, &len, reinterpret_cast<unsigned char*>(out),
                        kSealHeaderBytes) != 1 ||
      (n > 0 &&
       EVP_EncryptUpdate(c, body, &len,
                         static_cast<const unsigned char*>(payload), n) != 1) ||
      EVP_EncryptFinal_ex(c, body + n, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kSealTagBytes, body + n) !=
          1) {
    return Status::Internal("AES-256-GCM sealing failed");
  }
  return Status::OK();
}

Status Sealer::Open(char* frame, size_t size, SealHeader* header) {
  SealHeader h;
  if (!PeekSealed(frame, size, &h)) {
    return Status::InvalidArgument(
        "not a sealed frame (" + std::to_string(size) + " bytes, bad header)");
  }
  if (h.size > static_cast<uint64_t>(INT_MAX)) {
    return Status::InvalidArgument("a sealed frame holds at most 2 GiB");
  }
  unsigned char iv[12];
  Nonce(h, iv);
  EVP_CIPHER_CTX* c = impl_->dec;
  auto* body = reinterpret_cast<unsigned char*>(frame + kSealHeaderBytes);
  const int n = static_cast<int>(h.size);
  int len = 0;
  if (EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, iv) != 1 ||
      EVP_DecryptUpdate(c, nullptr, &len,
                        reinterpret_cast<unsigned char*>(frame),
                        kSealHeaderBytes) != 1 ||
      (n > 0 && EVP_DecryptUpdate(c, body, &len, body, n) != 1) ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, kSealTagBytes, body + n) !=
          1) {
    return Status::Internal("AES-256-GCM opening failed");
  }
  if (EVP_DecryptFinal_ex(c, body + n, &len) != 1) {
    return Status::InvalidArgument(
        "sealed frame " + std::to_string(h.seq) + " of lane " +
        std::to_string(h.lane) +
        " does not open under its lane's key (altered, or "
        "sealed under another key)");
  }
  *header = h;
  return Status::OK();
}

bool PeekLaneId(const char* data, size_t size, uint64_t* lane) {
  SealHeader h;
  if (!PeekSealed(data, size, &h) || h.dir != SealDir::kToReceiver)
    return false;
  *lane = h.lane;
  return true;
}

Status LaneReader::Open(const std::vector<Part>& parts, bool* probe,
                        uint64_t* lost, std::string* answer) {
  *probe = false;
  *lost = 0;
  if (parts.empty()) return Status::InvalidArgument("it is empty");
  const uint64_t last_before = last_seq_;
  uint64_t seq = last_seq_;
  for (size_t i = 0; i < parts.size(); ++i) {
    SealHeader h;
    if (!PeekSealed(parts[i].data, parts[i].size, &h) ||
        h.dir != SealDir::kToReceiver || h.kind == SealKind::kReady) {
      return Status::InvalidArgument("it is not sealed");
    }
    if (h.lane != id_)
      return Status::InvalidArgument("its parts are of different lanes");
    if (i == 0 && h.seq <= last_seq_) {
      return Status::InvalidArgument("it comes again or out of order (frame " +
                                     std::to_string(h.seq) + " of lane " +
                                     std::to_string(id_) + ", after " +
                                     std::to_string(last_seq_) + ")");
    }
    if (i > 0 && h.seq != seq + 1) {
      return Status::InvalidArgument(
          "its parts are not consecutive frames of its lane");
    }
    if (h.part != static_cast<uint16_t>(i)) {
      return Status::InvalidArgument(
          "its part " + std::to_string(i) + " is numbered " +
          std::to_string(h.part) + " (parts of it were lost)");
    }
    const bool last = i + 1 == parts.size();
    const SealKind want = h.kind == SealKind::kProbe && parts.size() == 1
                              ? SealKind::kProbe
                              : (last ? SealKind::kLast : SealKind::kData);
    if (h.kind != want) {
      return Status::InvalidArgument(
          last ? "its last part does not end a message"
               : "a part in it ends a message");
    }
    seq = h.seq;
  }
  // Opened only once every header checks out; a part that does not open
  // leaves the lane as it was (its plaintext is garbage, dropped with it).
  for (const Part& p : parts) {
    SealHeader h;
    KV_RETURN_IF_ERROR(sealer_->Open(p.data, p.size, &h));
  }
  SealHeader first;
  PeekSealed(parts[0].data, parts[0].size, &first);
  *lost = first.seq - last_before - 1;
  last_seq_ = seq;
  if (first.kind == SealKind::kProbe) {
    *probe = true;
    SealHeader ready = first;
    ready.kind = SealKind::kReady;
    ready.dir = SealDir::kToSender;
    ready.size = 0;
    answer->assign(kSealedOverhead, '\0');
    KV_RETURN_IF_ERROR(sealer_->Seal(ready, nullptr, &(*answer)[0]));
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<LaneWriter>> LaneWriter::Create() {
  std::string key = SealRandomBytes(kSealKeyBytes);
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Sealer> sealer, Sealer::Create(key));
  const std::string id = SealRandomBytes(8);
  return std::unique_ptr<LaneWriter>(
      new LaneWriter(LoadLe64(id.data()), std::move(key), std::move(sealer)));
}

std::string LaneWriter::Probe() {
  SealHeader h;
  h.kind = SealKind::kProbe;
  h.lane = id_;
  h.seq = ++seq_;
  std::string out(kSealedOverhead, '\0');
  CHECK(sealer_->Seal(h, nullptr, &out[0]).ok())
      << "AES-256-GCM sealing failed";
  return out;
}

bool LaneWriter::IsReady(char* reply, size_t size) {
  SealHeader h;
  return sealer_->Open(reply, size, &h).ok() && h.kind == SealKind::kReady &&
         h.dir == SealDir::kToSender && h.lane == id_;
}

Status LaneWriter::Seal(size_t i, size_t n, const void* data, size_t size,
                        char* out) {
  if (n > kMaxLaneParts) {
    return Status::InvalidArgument("a message of " + std::to_string(n) +
                                   " frames: a lane takes at most " +
                                   std::to_string(kMaxLaneParts));
  }
  SealHeader h;
  h.kind = i + 1 == n ? SealKind::kLast : SealKind::kData;
  h.part = static_cast<uint16_t>(i);
  h.lane = id_;
  h.seq = ++seq_;
  h.size = size;
  return sealer_->Seal(h, data, out);
}

Status OpenLaneMessage(const std::vector<LaneReader::Part>& parts,
                       const std::function<LaneReader*(uint64_t)>& reader_of,
                       LaneOpened* out) {
  if (parts.empty() || !PeekLaneId(parts[0].data, parts[0].size, &out->lane)) {
    return Status::InvalidArgument("it is not sealed");
  }
  LaneReader* reader = reader_of(out->lane);
  if (reader == nullptr)
    return Status::InvalidArgument("it names no lane offered here");
  return reader->Open(parts, &out->probe, &out->lost, &out->answer);
}

std::string LaneToken(const std::string& key) {
  static constexpr char kLabel[] = "kvtrain sealed lane token v1";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok =
      ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 &&
      EVP_DigestUpdate(ctx, kLabel, sizeof(kLabel) - 1) == 1 &&
      EVP_DigestUpdate(ctx, key.data(), key.size()) == 1 &&
      EVP_DigestFinal_ex(ctx, digest, &len) == 1 && len >= 16;
  EVP_MD_CTX_free(ctx);
  CHECK(ok) << "libcrypto has no SHA-256";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

std::string SealRandomBytes(size_t n) {
  std::string out(n, '\0');
  CHECK_EQ(RAND_bytes(reinterpret_cast<unsigned char*>(&out[0]),
                      static_cast<int>(n)),
           1)
      << "libcrypto has no random bytes";
  return out;
}

}  // namespace net
}  // namespace kvtrain
