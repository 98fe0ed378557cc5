// Compiled instead of the ZeroMQ transport when mdtrain is built without ZeroMQ.
#include <stdexcept>

#include "mdtrain/distribute/message_socket.h"

namespace mdtrain {

namespace {
[[noreturn]] void built_without_zmq() {
  throw std::runtime_error("[ps] mdtrain was built without ZeroMQ: install libzmq3-dev and rebuild");
}
}  // namespace

bool zmq_available() { return false; }

std::unique_ptr<MessageServerSocket> bind_zmq_server_socket(const std::string&, std::int64_t) { built_without_zmq(); }

std::unique_ptr<MessageClientSocket> connect_zmq_client_socket(const std::string&) { built_without_zmq(); }

}  // namespace mdtrain
