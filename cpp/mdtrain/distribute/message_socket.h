#pragma once
// Request/reply sockets for services with many clients, such as the parameter server: one server
// socket receives requests from any number of clients and answers each to its sender; a client
// socket talks to one server. Messages are whole byte strings (framing is the transport's job).
// The only implementation is ZeroMQ (distribute/zmq/: a ROUTER and a DEALER); without ZeroMQ the
// factories throw "[ps] mdtrain was built without ZeroMQ ...".
//
// Neither socket is thread-safe: each is used by one thread at a time (a socket may move to another
// thread between calls, e.g. bound on the caller's thread and then served on a server thread).
//
// Messages travel in MessageBuffers, so that megabyte messages (a pull's reply, a push) are not
// copied or freshly allocated on their way through a decorating socket (frame_auth.h):
// - a sender builds the message behind kMessageHeadroom spare bytes; a decorator writes its own
//   header into that room instead of copying the message into a frame of its own;
// - a receiver keeps one buffer across messages (its capacity is reused: no fresh allocation, and
//   no page faults, per message), and a decorator hands the message on where it arrived, its own
//   header left in front as headroom.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace mdtrain {

// Spare bytes a sender leaves in front of a message for the sockets' own headers (an
// authenticating socket needs 56).
inline constexpr std::size_t kMessageHeadroom = 64;

// `bytes` holds `headroom` bytes that are not part of the message (their content is unspecified),
// then the message.
struct MessageBuffer {
  std::string bytes;
  std::size_t headroom = 0;

  std::string_view message() const { return std::string_view(bytes).substr(headroom); }
  std::size_t size() const { return bytes.size() - headroom; }
  // No message (capacity kept).
  void clear() {
    bytes.clear();
    headroom = 0;
  }
  // A copy of `message` with no headroom (small messages, tests), reusing the capacity.
  void assign(std::string_view message) {
    bytes.assign(message.data(), message.size());
    headroom = 0;
  }
};

class MessageServerSocket {
 public:
  virtual ~MessageServerSocket() = default;
  // The address clients connect to, with a wildcard port ("tcp://127.0.0.1:*") resolved.
  virtual const std::string& endpoint() const = 0;
  // Waits up to `timeout_ms` for one request into `message` (its bytes' capacity reused); false
  // when none came. `client` names the sender for reply(). A request that is not a single frame
  // arrives as an empty message (which no protocol accepts), so the server can still answer it
  // with an error.
  virtual bool receive(std::string& client, MessageBuffer& message, int timeout_ms) = 0;
  // Sends message.message() to `client`; dropped silently when that client has gone (it may have
  // timed out). May overwrite the headroom's bytes; leaves the headroom's size and the message as
  // they were (the caller may send the same buffer again).
  virtual void reply(const std::string& client, MessageBuffer& message) = 0;
};

class MessageClientSocket {
 public:
  virtual ~MessageClientSocket() = default;
  virtual const std::string& endpoint() const = 0;
  // Queues message.message() for the server; false when it could not be queued within
  // `timeout_ms`. Treats the headroom as reply() does.
  virtual bool send(MessageBuffer& message, int timeout_ms) = 0;
  // Waits up to `timeout_ms` for the next message from the server into `message` (its bytes'
  // capacity reused); false when none came.
  virtual bool receive(MessageBuffer& message, int timeout_ms) = 0;
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
