// The baseline of ps_bench: a zero-copy ZeroMQ DEALER/ROUTER echo between
// two processes over tcp://127.0.0.1, i.e. what one push+pull costs with no
// framework at all.
#ifndef KVTRAIN_BENCH_RAW_ECHO_H_
#define KVTRAIN_BENCH_RAW_ECHO_H_

#include <cstddef>

#include "base/status.h"

namespace kvtrain {
namespace bench {

// Runs the echo server (ROUTER) on 127.0.0.1:port until a client sends an
// empty message. Each message goes back as received (no copy).
Status RunEchoServer(int port);

// Measured echo traffic of one size.
struct EchoResult {
  size_t bytes = 0;
  int in_flight = 1;
  long ops = 0;
  double seconds = 0;
  double us_per_op() const { return seconds * 1e6 / ops; }
  // Payload both directions.
  double gbps() const { return 2.0 * bytes * ops / seconds / 1e9; }
};

// Echo client (DEALER) of the server at 127.0.0.1:port.
class EchoClient {
 public:
  static StatusOr<EchoClient*> Connect(int port);  // owned by the caller
  ~EchoClient();
  // Echoes `bytes`-sized messages for about `min_seconds`, `in_flight` at a
  // time; the send side is zero-copy (zmq_msg_init_data).
  StatusOr<EchoResult> Run(size_t bytes, int in_flight, double min_seconds);
  // Tells the server to exit.
  void Stop();

 private:
  EchoClient(void* ctx, void* socket) : ctx_(ctx), socket_(socket) {}
  Status SendOne(const char* data, size_t bytes);
  Status RecvOne(size_t bytes);
  void* ctx_;
  void* socket_;
};

}  // namespace bench
}  // namespace kvtrain

#endif  // KVTRAIN_BENCH_RAW_ECHO_H_
