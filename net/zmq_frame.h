// ZeroMQ frames without copies, for both transports: a received frame whose
// bytes stay valid while it lives (ZmqFrame), and a frame that sends the
// caller's bytes in place (InitZeroCopy).
#ifndef KVTRAIN_NET_ZMQ_FRAME_H_
#define KVTRAIN_NET_ZMQ_FRAME_H_

#include <zmq.h>

#include <cstddef>

#include "base/status.h"
#include "net/zmq_error.h"

namespace kvtrain {
namespace net {

// One ZeroMQ message frame, closed with its owner. Receive into msg; the
// bytes are ZeroMQ's own buffer (no copy) and live as long as this object.
class ZmqFrame {
 public:
  ZmqFrame() { zmq_msg_init(&msg); }
  ~ZmqFrame() { zmq_msg_close(&msg); }
  ZmqFrame(const ZmqFrame&) = delete;
  ZmqFrame& operator=(const ZmqFrame&) = delete;

  const char* data() const {
    return static_cast<const char*>(
               zmq_msg_data(const_cast<zmq_msg_t*>(&msg))) +
           skip_front;
  }
  size_t size() const {
    return zmq_msg_size(const_cast<zmq_msg_t*>(&msg)) - skip_front - skip_back;
  }

  zmq_msg_t msg;
  // Bytes of msg that are not the frame's (a sealed frame's header and
  // tag, net/seal.h); the caller keeps them within the message.
  size_t skip_front = 0;
  size_t skip_back = 0;
};

// Makes *msg a frame of `size` bytes at `data`, sent without a copy: ZeroMQ
// calls release(data, hint) once it no longer needs the bytes (on its I/O
// thread after the write, or when the frame is closed unsent), also for an
// empty frame. On error (memory exhaustion) release runs at once and *msg
// is an empty frame, so the caller's accounting always sees one release.
inline Status InitZeroCopy(zmq_msg_t* msg, const void* data, size_t size,
                           zmq_free_fn* release, void* hint) {
  static char empty[1];
  void* bytes = data != nullptr ? const_cast<void*>(data) : empty;
  if (zmq_msg_init_data(msg, bytes, size, release, hint) != 0) {
    const std::string err = ZmqError();
    zmq_msg_init(msg);
    release(const_cast<void*>(data), hint);
    return Status::Internal("zmq_msg_init_data: " + err);
  }
  return Status::OK();
}

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_ZMQ_FRAME_H_
