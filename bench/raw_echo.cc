// Zero-copy ZeroMQ echo server and client (ps_bench's baseline).
#include "bench/raw_echo.h"

#include <zmq.h>

#include <chrono>
#include <string>
#include <vector>

#include "net/zmq_error.h"

namespace kvtrain {
namespace bench {
namespace {

using net::ZmqError;


void NoFree(void*, void*) {}

}  // namespace

Status RunEchoServer(int port) {
  void* ctx = zmq_ctx_new();
  void* s = zmq_socket(ctx, ZMQ_ROUTER);
  const int zero = 0;
  zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero));
  zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof(zero));
  const std::string ep = "tcp://127.0.0.1:" + std::to_string(port);
  if (zmq_bind(s, ep.c_str()) != 0) {
    return Status::Unavailable("echo server cannot bind " + ep + ": " +
                               ZmqError());
  }
  for (;;) {
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    if (zmq_msg_recv(&id, s, 0) < 0 || zmq_msg_recv(&body, s, 0) < 0) {
      return Status::Unavailable("echo server: " + ZmqError());
    }
    const bool quit = zmq_msg_size(&body) == 0;
    // The received message goes back as is: zmq_msg_send takes it over.
    zmq_msg_send(&id, s, ZMQ_SNDMORE);
    zmq_msg_send(&body, s, 0);
    if (quit) break;
  }
  zmq_close(s);
  zmq_ctx_term(ctx);
  return Status::OK();
}

StatusOr<EchoClient*> EchoClient::Connect(int port) {
  void* ctx = zmq_ctx_new();
  void* s = zmq_socket(ctx, ZMQ_DEALER);
  const int zero = 0;
  zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero));
  zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof(zero));
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
  const std::string ep = "tcp://127.0.0.1:" + std::to_string(port);
  if (zmq_connect(s, ep.c_str()) != 0) {
    return Status::Unavailable("echo client cannot connect " + ep + ": " +
                               ZmqError());
  }
  return new EchoClient(ctx, s);
}

EchoClient::~EchoClient() {
  zmq_close(socket_);
  zmq_ctx_term(ctx_);
}

Status EchoClient::SendOne(const char* data, size_t bytes) {
  zmq_msg_t m;
  zmq_msg_init_data(&m, const_cast<char*>(data), bytes, NoFree, nullptr);
  if (zmq_msg_send(&m, socket_, 0) < 0) {
    zmq_msg_close(&m);
    return Status::Unavailable("echo send: " + ZmqError());
  }
  return Status::OK();
}

Status EchoClient::RecvOne(size_t bytes) {
  zmq_msg_t m;
  zmq_msg_init(&m);
  const int n = zmq_msg_recv(&m, socket_, 0);
  zmq_msg_close(&m);
  if (n < 0 || static_cast<size_t>(n) != bytes) {
    return Status::DataLoss("echo came back with " + std::to_string(n) +
                            " bytes, sent " + std::to_string(bytes));
  }
  return Status::OK();
}

StatusOr<EchoResult> EchoClient::Run(size_t bytes, int in_flight,
                                     double min_seconds) {
  // The buffer must not change while ZeroMQ may still read it; it never does.
  std::vector<char> payload(bytes > 0 ? bytes : 1, 'e');
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < 2; ++i) {  // warm-up
    KV_RETURN_IF_ERROR(SendOne(payload.data(), bytes));
    KV_RETURN_IF_ERROR(RecvOne(bytes));
  }
  EchoResult r;
  r.bytes = bytes;
  r.in_flight = in_flight;
  const auto t0 = Clock::now();
  for (int i = 0; i < in_flight; ++i) {
    KV_RETURN_IF_ERROR(SendOne(payload.data(), bytes));
  }
  for (;;) {
    KV_RETURN_IF_ERROR(RecvOne(bytes));
    ++r.ops;
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r.seconds >= min_seconds && r.ops >= 3) break;
    KV_RETURN_IF_ERROR(SendOne(payload.data(), bytes));
  }
  for (int i = 1; i < in_flight; ++i) KV_RETURN_IF_ERROR(RecvOne(bytes));
  return r;
}

void EchoClient::Stop() {
  zmq_msg_t m;
  zmq_msg_init(&m);
  zmq_msg_send(&m, socket_, 0);
  zmq_msg_init(&m);
  zmq_msg_recv(&m, socket_, 0);
  zmq_msg_close(&m);
}

}  // namespace bench
}  // namespace kvtrain
