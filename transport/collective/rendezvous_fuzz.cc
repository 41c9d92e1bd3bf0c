// Fuzz target: the rendezvous's decoders, of a registration (what the
// server reads from any connection) and of the server's answer (what a rank
// reads). Checked: what ParseRegisterRequest accepts is in range, encodes
// back to the same request, and fits kMaxRegistrationBytes; an accepted
// answer has exactly `size` endpoints.
//
// Input: byte 0 is the group size for the answer (1 + byte 0 mod 16); the
// rest is frames joined by kFrameSeparator (net/fuzz_frames.h).
#include <glog/logging.h>

#include <cstdint>

#include "net/fuzz_frames.h"
#include "transport/collective/rendezvous.h"

namespace kvtrain {
namespace collective {
namespace {

void Run(std::string_view input) {
  const int size = 1 + static_cast<uint8_t>(input[0]) % 16;
  const std::vector<std::string_view> frames =
      net::SplitAt(input.substr(1), net::kFrameSeparator);
  StatusOr<RegisterRequest> req = ParseRegisterRequest(frames);
  if (req.ok()) {
    CHECK(req->rank >= 0 && req->rank < 65535) << req->rank;
    CHECK(req->size >= 1 && req->size <= 65535) << req->size;
    CHECK_GE(req->endpoint.port, 1);
    CHECK_LE(req->endpoint.port, 65535);
    const std::string again = EncodeRegisterRequest(*req);
    StatusOr<RegisterRequest> back = ParseRegisterRequest({again});
    CHECK(back.ok()) << back.status() << ": " << again;
    CHECK_EQ(back->rank, req->rank);
    CHECK_EQ(back->size, req->size);
    CHECK_EQ(back->endpoint.Encode(), req->endpoint.Encode());
  } else {
    CHECK(!req.status().message().empty());
  }
  StatusOr<std::vector<Endpoint>> table = ParseRendezvousAnswer(frames, size);
  if (table.ok()) CHECK_EQ(static_cast<int>(table->size()), size);
}

}  // namespace
}  // namespace collective
}  // namespace kvtrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  kvtrain::collective::Run(
      std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
