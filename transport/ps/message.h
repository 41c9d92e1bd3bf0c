// A transport message (a wire::Header plus raw data frames) and its codec:
// encoding to ZeroMQ-ready frames and validating decoding of untrusted input.
#ifndef KVTRAIN_TRANSPORT_PS_MESSAGE_H_
#define KVTRAIN_TRANSPORT_PS_MESSAGE_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "transport/ps/ps.h"
#include "transport/ps/wire.pb.h"

namespace kvtrain {
namespace ps {

// Node ids: the scheduler is 1, server rank r is 8 + 2r, worker rank r is
// 9 + 2r (0: not yet registered).
inline constexpr int kSchedulerId = 1;
// Control messages (registration, barriers, heartbeats, abort) go ahead of
// every data message queued on a connection.
inline constexpr int kControlPriority = INT_MAX;
inline int ServerId(int rank) { return 8 + 2 * rank; }
inline int WorkerId(int rank) { return 9 + 2 * rank; }

struct Message {
  wire::Header meta;
  // Data frames in the order of meta.data (kinds set by the sender; sizes
  // are filled in by EncodeMessage).
  std::vector<Blob> data;

  // Appends a data frame of `kind`.
  void AddFrame(wire::FrameKind kind, Blob blob);
  // The first frame of `kind`, or an empty Blob.
  Blob Frame(wire::FrameKind kind) const;
};

// Frame 0 is the serialized header (with meta.data rewritten to describe
// msg->data); frames 1..n are the data blobs, not copied.
std::vector<Blob> EncodeMessage(Message* msg);

// Validates and decodes received frames. Errors say what is wrong: no
// frames, an unparsable header, an unknown command or frame kind, a frame
// count or frame size that disagrees with the header. Data frames that are
// not 8-byte aligned are copied into aligned storage. `in_shm` marks frames
// that lie in a sender's shared memory (RawMessage::in_shm): all but values
// are copied out, so that keys, lens and bytes checked here cannot change
// under their reader afterwards.
Status DecodeMessage(std::vector<Blob> frames, Message* out,
                     const std::vector<bool>& in_shm = {});

// A Status from a wire status code and message (unknown codes -> Internal).
Status StatusFromWire(int code, const std::string& message);

// Role conversions.
wire::Role ToWireRole(Role role);
bool FromWireRole(wire::Role role, Role* out);

// "push+pull request ts=5 app=0 keys=3 [1..9] bytes=1024" for PS_VERBOSE=2.
std::string DescribeData(const Message& msg);

// Printable form of a ZeroMQ routing id (tokens are printable; others are
// hex-escaped), for logs.
std::string PrintableToken(const std::string& token);

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_MESSAGE_H_
