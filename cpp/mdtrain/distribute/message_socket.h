#pragma once
// Request/reply sockets for services with many clients, such as the parameter server: one server
// socket receives requests from any number of clients and answers each to its sender; a client
// socket talks to one server. Messages are whole byte strings (framing is the transport's job).
// The only implementation is ZeroMQ (distribute/zmq/: a ROUTER and a DEALER); without ZeroMQ the
// factories throw "[ps] mdtrain was built without ZeroMQ ...".
//
// Neither socket is thread-safe: each is used by one thread at a time (a socket may move to another
// thread between calls, e.g. bound on the caller's thread and then served on a server thread).
#include <cstdint>
#include <memory>
#include <string>

namespace mdtrain {

class MessageServerSocket {
 public:
  virtual ~MessageServerSocket() = default;
  // The address clients connect to, with a wildcard port ("tcp://127.0.0.1:*") resolved.
  virtual const std::string& endpoint() const = 0;
  // Waits up to `timeout_ms` for one request; false when none came. `client` names the sender for
  // reply(). A request that is not a single frame arrives as an empty message (which no protocol
  // accepts), so the server can still answer it with an error.
  virtual bool receive(std::string& client, std::string& message, int timeout_ms) = 0;
  // Sends `message` to `client`; dropped silently when that client has gone (it may have timed out).
  virtual void reply(const std::string& client, const std::string& message) = 0;
};

class MessageClientSocket {
 public:
  virtual ~MessageClientSocket() = default;
  virtual const std::string& endpoint() const = 0;
  // Queues `message` for the server; false when it could not be queued within `timeout_ms`.
  virtual bool send(const std::string& message, int timeout_ms) = 0;
  // Waits up to `timeout_ms` for the next message from the server; false when none came.
  virtual bool receive(std::string& message, int timeout_ms) = 0;
};

// Whether mdtrain was built with ZeroMQ.
bool zmq_available();
// A ZeroMQ ROUTER bound to `endpoint` ("tcp://127.0.0.1:*", "inproc://name", ...). Throws
// std::runtime_error("[zmq] ...") when the bind fails. A client sending a message longer than
// `max_message_bytes` (when > 0) is disconnected by ZeroMQ before the message is allocated, so a
// foreign peer cannot make the server allocate without bound.
std::unique_ptr<MessageServerSocket> bind_zmq_server_socket(const std::string& endpoint,
                                                            std::int64_t max_message_bytes = -1);
// A ZeroMQ DEALER connected to `endpoint`. Connecting never waits, and messages sent while the
// server is away are queued and delivered when it (re)appears; destroying the socket discards
// them (linger 0), which is how a caller gives up on requests it reported as timed out.
std::unique_ptr<MessageClientSocket> connect_zmq_client_socket(const std::string& endpoint);

}  // namespace mdtrain
