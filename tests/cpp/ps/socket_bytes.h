#pragma once
// What the parameter-server tests share: whole byte strings over the MessageBuffer sockets, and the
// skip for builds without ZeroMQ.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "mdtrain/distribute/message_socket.h"

namespace mdtrain {

// The sockets carry MessageBuffers; these tests speak whole strings.
inline bool send_bytes(MessageClientSocket& socket, std::string_view bytes, int timeout_ms = 5000) {
  MessageBuffer buffer;
  buffer.assign(bytes);
  return socket.send(buffer, timeout_ms);
}

inline bool receive_bytes(MessageClientSocket& socket, std::string& bytes, int timeout_ms) {
  MessageBuffer buffer;
  if (!socket.receive(buffer, timeout_ms)) return false;
  bytes = std::string(buffer.message());
  return true;
}

}  // namespace mdtrain

#define SKIP_WITHOUT_ZMQ() \
  if (!zmq_available()) GTEST_SKIP() << "mdtrain was built without ZeroMQ (MDTRAIN_ZMQ=OFF or libzmq3-dev missing)"
