// ZmqError: the text of ZeroMQ's last error on this thread, for messages.
#ifndef KVTRAIN_NET_ZMQ_ERROR_H_
#define KVTRAIN_NET_ZMQ_ERROR_H_

#include <zmq.h>

#include <string>

namespace kvtrain {
namespace net {

inline std::string ZmqError() { return zmq_strerror(zmq_errno()); }

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_ZMQ_ERROR_H_
