// Same-host links: peers that share a kernel and a network namespace talk
// over Unix-domain sockets instead of TCP. Such a socket admits only
// processes of this process's user id (the kernel's SO_PEERCRED, checked by
// ZeroMQ before any byte is read), so it needs no CURVE: the job's key is no
// secret from a process of the same user (it can read our environment and
// memory), and no other user can connect at all. The sockets are files in
// /tmp/kvtrain-<uid>, a directory of mode 0700 that this user owns, so no
// other user can bind a name there either: not even the name of a node that
// died, which its peers would reconnect to (an abstract socket name has no
// owner). A peer in another network namespace is "another host" and keeps
// TCP + CURVE.
#ifndef KVTRAIN_NET_SAME_HOST_H_
#define KVTRAIN_NET_SAME_HOST_H_

#include <string>

#include "base/status.h"

namespace kvtrain {
namespace net {

// "<kernel boot id>.<network namespace inode>": equal exactly for
// processes that can reach each other's abstract sockets. "" if unknown.
std::string HostIdentity();

// Also binds `socket` (a ROUTER already bound on TCP) on a fresh ipc
// endpoint in SocketDir() named after `prefix`, open to this user id only
// and without CURVE. Call it after the socket's other binds: it switches the socket's
// mechanism to NULL for binds that follow (earlier listeners keep theirs).
// Returns the address to advertise, "<host identity>@<name>", the name
// ending with ".<PID namespace>".
StatusOr<std::string> BindSameHost(void* socket, const std::string& prefix);

// The host identity of an advertised `address` ("<host identity>@<name>",
// BindSameHost's result): "" for "" or a malformed address.
std::string SameHostIdentity(const std::string& address);

// For a peer that advertised `address` (BindSameHost's result, or ""): the
// endpoint to connect to, "ipc://<SocketDir()>/name", when the peer is on
// this host and the directory is sound; else "" (use TCP).
std::string SameHostEndpoint(const std::string& address);

// /tmp/kvtrain-<euid>, created (mode 0700) if missing; an error naming it
// when it is not a directory of this user's that only this user can enter
// (another user made it first): same-host links are then not used.
StatusOr<std::string> SocketDir();

// The checks SocketDir makes, on any path (for tests).
Status CheckPrivateDir(const std::string& path);

// The inode of this process's PID namespace, as text ("" if unknown).
// BindSameHost ends the socket's name with ".<it>", so that a peer can tell
// whether this process's /proc/PID entries are its own to open (net/shm.h).
std::string PidNamespace();

// Whether the peer that advertised `address` is on this host (as
// SameHostEndpoint) and in this process's PID namespace.
bool SameHostSharesPids(const std::string& address);

// Whether `fd` (e.g. a message's ZMQ_SRCFD) is a Unix-domain socket: a
// connection on the same-host socket. False for -1 and anything else.
bool IsUnixSocket(int fd);

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_SAME_HOST_H_
