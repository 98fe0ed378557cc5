#pragma once
// Authenticated frames for request/reply sockets (message_socket.h): every message a socket sends
// carries an HMAC-SHA256 tag over its bytes under a key the job shares, and a receiver drops every
// message whose tag does not verify before it reads a byte of the body. The wire format, shared
// byte for byte with Python (mdtrain._ps):
//
//   frame = tag[32] | session[16] | counter[8, little-endian] | body
//   tag   = HMAC-SHA256(key, "mdtrain-frame-v1" | direction[1] | session | counter | body)
//
// direction is 'Q' for a request (client to server) and 'R' for a reply, so a reply recorded on
// the wire cannot be offered to a server as a request. session is 16 random bytes drawn when the
// sending socket is made; counter starts at 1 and grows by 1 per frame that socket sends. A
// receiver remembers, per session, the last counter it accepted and accepts only larger ones
// (for at most 4096 sessions, the least recently used forgotten first).
//
// What this protects against, for anyone without the key: forged frames (a request the job did
// not send: a push, an assign, a shutdown, a save into a directory of their choosing), frames
// altered in flight, and frames recorded and replayed to a receiver that still remembers their
// session. What it does not protect: confidentiality (frames are not encrypted: whoever sees the
// traffic sees the weights and gradients); replay of a recorded session to a server that restarted
// (or forgot the session among 4096 newer ones), which accepts the session as new; and anything
// done by a holder of the key. Frames lost or dropped are not retransmitted here: the protocol
// above times out as it would for a lost message.
//
// Nothing here knows the transport: the decorators wrap the abstract sockets. They copy no
// message: a sender's message is signed where it lies, the frame header written into the
// MessageBuffer's headroom (message_socket.h), and a received frame is verified where it arrived
// and handed on with its header left as headroom (a message without the room is copied once).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "mdtrain/distribute/message_socket.h"

namespace mdtrain {

inline constexpr std::size_t kFrameKeyBytes = 32;
inline constexpr std::size_t kFrameTagBytes = 32;
inline constexpr std::size_t kFrameSessionBytes = 16;
inline constexpr std::size_t kFrameCounterBytes = 8;
inline constexpr std::size_t kFrameOverheadBytes = kFrameTagBytes + kFrameSessionBytes + kFrameCounterBytes;  // 56
inline constexpr std::size_t kFrameReplaySessions = 4096;
static_assert(kFrameOverheadBytes <= kMessageHeadroom, "a sender's headroom must hold a frame header");

enum class FrameDirection : char { Request = 'Q', Reply = 'R' };

// The job's 32 raw key bytes (the caller derives them; nothing here reads the environment).
// Throws std::invalid_argument("[ps] ...") for any other length.
class FrameKey {
 public:
  explicit FrameKey(std::string bytes);
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// The frame for `body` with an explicit session and counter: the pure function the wire format
// defines (FrameAuthenticator::sign uses it; tests and Python's known answers call it directly).
// Throws std::invalid_argument("[ps] ...") when `session` is not 16 bytes.
std::string frame_sign(const FrameKey& key, FrameDirection direction, std::string_view session, std::uint64_t counter,
                       std::string_view body);

// The last accepted counter of each session, for at most `max_sessions` sessions (the least
// recently used forgotten first, so memory stays bounded however many sessions come and go).
class ReplayWindow {
 public:
  explicit ReplayWindow(std::size_t max_sessions = kFrameReplaySessions);
  // Whether `counter` is larger than the last one accepted for `session` (any counter >= 1 for a
  // session not remembered); when it is, it becomes the session's last.
  bool accept(std::string_view session, std::uint64_t counter);
  std::size_t sessions() const { return order_.size(); }

 private:
  using Entry = std::pair<std::string, std::uint64_t>;
  std::size_t max_sessions_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

// Counts frames dropped by receivers; shared by the sockets of one owner (a client replaces its
// sockets on timeouts and keeps one count). Read from any thread.
using FrameRejections = std::atomic<std::uint64_t>;

// One socket's signing state (its session, its next counter) and its receiving state (the peers'
// sessions seen). Not thread-safe, like the sockets it serves.
class FrameAuthenticator {
 public:
  explicit FrameAuthenticator(FrameKey key, std::shared_ptr<FrameRejections> rejections = nullptr,
                              std::size_t max_sessions = kFrameReplaySessions);
  // This socket's next frame for `body`.
  std::string sign(FrameDirection direction, std::string_view body);
  // The same into `frame`, reusing its capacity (a socket's send buffer).
  void sign_into(FrameDirection direction, std::string_view body, std::string& frame);
  // Signs message.message() in place: writes the frame header into the last kFrameOverheadBytes
  // of the headroom and takes them out of it, so message.message() is the frame. Throws
  // std::invalid_argument("[ps] ...") when the headroom is smaller.
  void sign_in_place(FrameDirection direction, MessageBuffer& message);
  // Verifies `frame` (length, then the tag in constant time, then the replay window) and on
  // success sets `body` to the body it carries (a view into `frame`). On failure returns false,
  // leaves `body` alone and counts the frame. Nothing is parsed before the tag has verified.
  bool open(FrameDirection direction, std::string_view frame, std::string_view& body);
  // The same, setting `body` to a copy of it (left alone on failure).
  bool open(FrameDirection direction, std::string_view frame, std::string& body);
  // Verifies message.message() as a frame and on success adds its header to the headroom, so
  // message.message() is the body; on failure leaves `message` alone.
  bool open(FrameDirection direction, MessageBuffer& message);
  std::uint64_t rejected() const { return rejections_->load(); }
  const std::string& session() const { return session_; }

 private:
  FrameKey key_;
  std::shared_ptr<FrameRejections> rejections_;
  std::string session_;
  std::uint64_t next_counter_ = 1;
  ReplayWindow window_;
};

// A server socket whose receive() returns only requests that verify ('Q' frames), dropping and
// counting the others and waiting on for what is left of the timeout, and whose reply() signs
// ('R' frames). A dropped request gets no answer: its sender cannot be told anything it could
// trust, and answering would let anyone probe the server. A message sent with at least
// kFrameOverheadBytes of headroom is signed in place; one with less is copied into a frame.
class AuthenticatedServerSocket final : public MessageServerSocket {
 public:
  AuthenticatedServerSocket(std::unique_ptr<MessageServerSocket> inner, FrameKey key,
                            std::shared_ptr<FrameRejections> rejections = nullptr);
  const std::string& endpoint() const override { return inner_->endpoint(); }
  bool receive(std::string& client, MessageBuffer& message, int timeout_ms) override;
  void reply(const std::string& client, MessageBuffer& message) override;
  std::uint64_t frames_rejected() const { return auth_.rejected(); }

 private:
  std::unique_ptr<MessageServerSocket> inner_;
  FrameAuthenticator auth_;
  MessageBuffer out_;  // frames of messages sent without headroom: its capacity is reused
};

// The client side: send() signs ('Q'), receive() returns only replies that verify ('R').
class AuthenticatedClientSocket final : public MessageClientSocket {
 public:
  AuthenticatedClientSocket(std::unique_ptr<MessageClientSocket> inner, FrameKey key,
                            std::shared_ptr<FrameRejections> rejections = nullptr);
  const std::string& endpoint() const override { return inner_->endpoint(); }
  bool send(MessageBuffer& message, int timeout_ms) override;
  bool receive(MessageBuffer& message, int timeout_ms) override;
  std::uint64_t frames_rejected() const { return auth_.rejected(); }

 private:
  std::unique_ptr<MessageClientSocket> inner_;
  FrameAuthenticator auth_;
  MessageBuffer out_;
};

std::unique_ptr<AuthenticatedServerSocket> authenticate(std::unique_ptr<MessageServerSocket> inner, FrameKey key,
                                                        std::shared_ptr<FrameRejections> rejections = nullptr);
std::unique_ptr<AuthenticatedClientSocket> authenticate(std::unique_ptr<MessageClientSocket> inner, FrameKey key,
                                                        std::shared_ptr<FrameRejections> rejections = nullptr);

}  // namespace mdtrain
