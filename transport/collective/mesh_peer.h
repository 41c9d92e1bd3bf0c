// Internal to the mesh: what Mesh holds per peer, shared by mesh.cc and
// mesh_recv.cc.
#ifndef KVTRAIN_TRANSPORT_COLLECTIVE_MESH_PEER_H_
#define KVTRAIN_TRANSPORT_COLLECTIVE_MESH_PEER_H_

#include <memory>
#include <mutex>

#include "transport/collective/mesh.h"
#include "net/seal.h"

namespace kvtrain {
namespace collective {

struct Mesh::Peer {
  std::mutex mu;
  void* dealer GUARDED_BY(mu) = nullptr;
  void* monitor = nullptr;  // PAIR receiving the DEALER's events; thread only
  Endpoint endpoint;
  bool ipc = false;  // connected over the peer's ipc:// socket
  // Once the peer answered the lane's probe (mesh_lane.cc): messages go
  // over this DEALER, sealed by the writer, instead of `dealer`.
  void* lane GUARDED_BY(mu) = nullptr;
  std::unique_ptr<net::LaneWriter> writer GUARDED_BY(mu);
};

}  // namespace collective
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_COLLECTIVE_MESH_PEER_H_
