// The ZeroMQ implementation of message_socket.h: a ROUTER for servers, a DEALER for clients.
#include <zmq.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <string>
#include <string_view>

#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/message_socket.h"

namespace mdtrain {

namespace {

// One context for the process, so inproc:// endpoints connect across objects. It is never
// terminated: zmq_ctx_term blocks until every socket is closed, which at static destruction could
// hang on a socket some other static still holds.
void* context() {
  static void* ctx = [] {
    void* c = zmq_ctx_new();
    if (!c) fail<std::runtime_error>("[zmq] cannot create a context: ", zmq_strerror(zmq_errno()));
    return c;
  }();
  return ctx;
}

[[noreturn]] void zmq_fail(const std::string& what) {
  fail<std::runtime_error>("[zmq] ", what, ": ", zmq_strerror(zmq_errno()));
}

// Owns a socket; linger 0 so closing never waits for unsent messages to a peer that is gone.
class Socket {
 public:
  explicit Socket(int type) : socket_(zmq_socket(context(), type)) {
    if (!socket_) zmq_fail("cannot create a socket");
    int linger = 0;
    zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof linger);
  }
  ~Socket() { zmq_close(socket_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  void* get() const { return socket_; }

  // Waits for `events` (ZMQ_POLLIN/ZMQ_POLLOUT) up to `timeout_ms`; true when ready.
  bool wait(short events, int timeout_ms) const {
    zmq_pollitem_t item{socket_, 0, events, 0};
    for (;;) {
      int rc = zmq_poll(&item, 1, timeout_ms);
      if (rc >= 0) return rc > 0;
      if (zmq_errno() != EINTR) zmq_fail("poll failed");
    }
  }

  // The next frame into `out` (its capacity reused: a receive buffer kept across messages costs no
  // allocation per message); `more` tells whether another frame of the same message follows.
  void receive_frame(std::string& out, bool& more) const {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    while (zmq_msg_recv(&msg, socket_, 0) < 0) {
      if (zmq_errno() != EINTR) {
        zmq_msg_close(&msg);
        zmq_fail("receive failed");
      }
    }
    more = zmq_msg_more(&msg) != 0;
    try {
      out.assign(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    } catch (...) {
      zmq_msg_close(&msg);
      throw;
    }
    zmq_msg_close(&msg);
  }

  bool send_frame(std::string_view frame, int flags) const {
    while (zmq_send(socket_, frame.data(), frame.size(), flags) < 0) {
      if (zmq_errno() == EAGAIN || zmq_errno() == EHOSTUNREACH) return false;
      if (zmq_errno() != EINTR) zmq_fail("send failed");
    }
    return true;
  }

 private:
  void* socket_;
};

class ZmqServerSocket final : public MessageServerSocket {
 public:
  ZmqServerSocket(const std::string& endpoint, std::int64_t max_message_bytes) : socket_(ZMQ_ROUTER) {
    if (max_message_bytes > 0) {
      std::int64_t limit = max_message_bytes;
      if (zmq_setsockopt(socket_.get(), ZMQ_MAXMSGSIZE, &limit, sizeof limit) != 0)
        zmq_fail("cannot limit the message size");
    }
    // ZeroMQ closes sockets on its I/O thread, after zmq_close returns: a listener this process
    // closed a moment ago (a server restarted in place) can still hold the port briefly. Retry
    // that case for up to a second; a port held by someone else still fails, just later.
    for (int attempt = 0; zmq_bind(socket_.get(), endpoint.c_str()) != 0; ++attempt) {
      if (zmq_errno() != EADDRINUSE || attempt == 100) zmq_fail("cannot bind '" + endpoint + "'");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    char buffer[512];
    size_t size = sizeof buffer;
    if (zmq_getsockopt(socket_.get(), ZMQ_LAST_ENDPOINT, buffer, &size) != 0) zmq_fail("cannot read the endpoint");
    endpoint_ = std::string(buffer);  // NUL-terminated
  }
  ~ZmqServerSocket() override { zmq_unbind(socket_.get(), endpoint_.c_str()); }
  const std::string& endpoint() const override { return endpoint_; }

  bool receive(std::string& client, MessageBuffer& message, int timeout_ms) override {
    if (!socket_.wait(ZMQ_POLLIN, timeout_ms)) return false;
    bool more = false;
    socket_.receive_frame(client, more);
    message.clear();
    int frames = 0;
    while (more) {
      socket_.receive_frame(message.bytes, more);
      ++frames;
    }
    if (frames != 1) message.clear();  // a foreign multi-frame message: answered as malformed
    return true;
  }

  void reply(const std::string& client, MessageBuffer& message) override {
    // A ROUTER drops messages to unknown peers, and DONTWAIT keeps a slow client from blocking
    // the server: either way the client sees no answer and times out, naming this server.
    if (socket_.send_frame(client, ZMQ_SNDMORE | ZMQ_DONTWAIT)) socket_.send_frame(message.message(), ZMQ_DONTWAIT);
  }

 private:
  Socket socket_;
  std::string endpoint_;
};

class ZmqClientSocket final : public MessageClientSocket {
 public:
  explicit ZmqClientSocket(const std::string& endpoint) : socket_(ZMQ_DEALER), endpoint_(endpoint) {
    if (zmq_connect(socket_.get(), endpoint.c_str()) != 0) zmq_fail("cannot connect to '" + endpoint + "'");
  }
  const std::string& endpoint() const override { return endpoint_; }

  bool send(MessageBuffer& message, int timeout_ms) override {
    if (!socket_.wait(ZMQ_POLLOUT, timeout_ms)) return false;
    return socket_.send_frame(message.message(), ZMQ_DONTWAIT);
  }

  bool receive(MessageBuffer& message, int timeout_ms) override {
    if (!socket_.wait(ZMQ_POLLIN, timeout_ms)) return false;
    bool more = false;
    message.headroom = 0;
    socket_.receive_frame(message.bytes, more);
    bool extra = false;
    std::string discarded;
    while (more) {
      socket_.receive_frame(discarded, more);
      extra = true;
    }
    if (extra) message.clear();
    return true;
  }

 private:
  Socket socket_;
  std::string endpoint_;
};

}  // namespace

bool zmq_available() { return true; }

std::unique_ptr<MessageServerSocket> bind_zmq_server_socket(const std::string& endpoint,
                                                            std::int64_t max_message_bytes) {
  return std::make_unique<ZmqServerSocket>(endpoint, max_message_bytes);
}

std::unique_ptr<MessageClientSocket> connect_zmq_client_socket(const std::string& endpoint) {
  return std::make_unique<ZmqClientSocket>(endpoint);
}

}  // namespace mdtrain
