// Authenticated frames (distribute/frame_auth.h): the format against Python's hmac, what open()
// refuses, the replay window, the socket decorators, and a real ParameterShardServer with a key
// refusing everyone without it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/frame_auth.h"
#include "mdtrain/distribute/message_socket.h"
#include "mdtrain/optim/sgd.h"
#include "mdtrain/strategy/parameter_server/parameter_server_client.h"
#include "mdtrain/strategy/parameter_server/parameter_server_worker_strategy.h"
#include "mdtrain/strategy/parameter_server/parameter_shard_server.h"
#include "ps/socket_bytes.h"

namespace mdtrain {
namespace {

std::string hex_bytes(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string counting_bytes(int first, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(first + i));
  return s;
}

FrameKey key_a() { return FrameKey(counting_bytes(0, 32)); }
FrameKey key_b() { return FrameKey(std::string(32, 'b')); }

TEST(FrameAuth, KnownAnswerMatchesPythonHmac) {
  // python3 -c "import hmac, hashlib, struct; key = bytes(range(32)); s = bytes(range(0xa0, 0xb0));
  //   c = struct.pack('<Q', 0x0102030405060708); b = b'pull weights';
  //   print((hmac.new(key, b'mdtrain-frame-v1' + b'Q' + s + c + b, hashlib.sha256).digest() + s + c + b).hex())"
  const std::string expected = hex_bytes(
      "6e85782100e70c05d730b141506cfc4540d916ad7ce2f68ad9e53d10a7d12c28"
      "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"
      "0807060504030201"
      "70756c6c2077656967687473");
  const std::string session = counting_bytes(0xa0, 16);
  EXPECT_EQ(frame_sign(key_a(), FrameDirection::Request, session, 0x0102030405060708ull, "pull weights"), expected);
  // The direction is under the tag: the same bytes as a reply have another tag (same script, b'R').
  const std::string reply = frame_sign(key_a(), FrameDirection::Reply, session, 0x0102030405060708ull, "pull weights");
  EXPECT_EQ(reply.substr(0, 32), hex_bytes("9086a9edba1b4a8b16191b484d988f3caed58d7f83e683abad7532a9dfe2365d"));
  EXPECT_EQ(reply.substr(32), expected.substr(32));
}

TEST(FrameAuth, SignedFramesOpenInOrderWithTheirBodies) {
  FrameAuthenticator sender(key_a()), receiver(key_a());
  EXPECT_EQ(sender.session().size(), kFrameSessionBytes);
  EXPECT_NE(sender.session(), receiver.session());  // drawn at random per socket
  for (const std::string& body : {std::string("first"), std::string(), std::string(100000, '\x7f')}) {
    const std::string frame = sender.sign(FrameDirection::Request, body);
    ASSERT_EQ(frame.size(), kFrameOverheadBytes + body.size());
    std::string opened = "stale";
    ASSERT_TRUE(receiver.open(FrameDirection::Request, frame, opened));
    EXPECT_EQ(opened, body);
  }
  EXPECT_EQ(receiver.rejected(), 0u);
}

TEST(FrameAuth, CountersStartAtOneAndGrowByOne) {
  FrameAuthenticator sender(key_a());
  for (std::uint64_t c = 1; c <= 3; ++c) {
    const std::string frame = sender.sign(FrameDirection::Reply, "x");
    EXPECT_EQ(frame, frame_sign(key_a(), FrameDirection::Reply, sender.session(), c, "x"));
  }
}

TEST(FrameAuth, AFlippedBitAnywhereIsRejectedAndLeavesTheBodyAlone) {
  FrameAuthenticator sender(key_a());
  const std::string frame = sender.sign(FrameDirection::Request, "push gradients");
  std::uint64_t flips = 0;
  // Every byte of tag, session, counter and body, each bit in turn.
  for (std::size_t i = 0; i < frame.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = frame;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      FrameAuthenticator receiver(key_a());
      std::string body = "untouched";
      EXPECT_FALSE(receiver.open(FrameDirection::Request, bad, body)) << "byte " << i << " bit " << bit;
      EXPECT_EQ(body, "untouched");
      EXPECT_EQ(receiver.rejected(), 1u);
      ++flips;
    }
  }
  EXPECT_EQ(flips, 8 * (kFrameOverheadBytes + 14));
  FrameAuthenticator receiver(key_a());
  std::string body;
  EXPECT_TRUE(receiver.open(FrameDirection::Request, frame, body));
}

TEST(FrameAuth, AnotherKeyIsRejected) {
  FrameAuthenticator sender(key_b()), receiver(key_a());
  std::string body;
  EXPECT_FALSE(receiver.open(FrameDirection::Request, sender.sign(FrameDirection::Request, "shutdown"), body));
  EXPECT_EQ(receiver.rejected(), 1u);
}

TEST(FrameAuth, AReplyOfferedAsARequestIsRejected) {
  FrameAuthenticator server(key_a()), other_server(key_a());
  const std::string reply = server.sign(FrameDirection::Reply, "done");
  std::string body;
  EXPECT_FALSE(other_server.open(FrameDirection::Request, reply, body));
  EXPECT_TRUE(other_server.open(FrameDirection::Reply, reply, body));
  EXPECT_EQ(body, "done");
}

TEST(FrameAuth, AReplayedOrOlderCounterIsRejected) {
  FrameAuthenticator sender(key_a()), receiver(key_a());
  const std::string first = sender.sign(FrameDirection::Request, "1");
  const std::string second = sender.sign(FrameDirection::Request, "2");
  std::string body;
  EXPECT_TRUE(receiver.open(FrameDirection::Request, first, body));
  EXPECT_FALSE(receiver.open(FrameDirection::Request, first, body));  // the same frame again
  EXPECT_TRUE(receiver.open(FrameDirection::Request, second, body));
  EXPECT_FALSE(receiver.open(FrameDirection::Request, first, body));  // older than the last
  EXPECT_EQ(body, "2");
  EXPECT_EQ(receiver.rejected(), 2u);
  // Counter 0 is never sent, so it is never accepted, even as a session's first frame.
  EXPECT_FALSE(receiver.open(FrameDirection::Request,
                             frame_sign(key_a(), FrameDirection::Request, counting_bytes(1, 16), 0, "z"), body));
}

TEST(FrameAuth, ShortJunkIsRejected) {
  FrameAuthenticator receiver(key_a());
  std::string body = "untouched";
  EXPECT_FALSE(receiver.open(FrameDirection::Request, "thirteen byte", body));
  EXPECT_FALSE(receiver.open(FrameDirection::Request, "", body));
  EXPECT_FALSE(receiver.open(FrameDirection::Request, std::string(kFrameOverheadBytes - 1, '\0'), body));
  EXPECT_FALSE(receiver.open(FrameDirection::Request, std::string(kFrameOverheadBytes, '\0'), body));
  EXPECT_EQ(body, "untouched");
  EXPECT_EQ(receiver.rejected(), 4u);
}

TEST(FrameAuth, SessionsCountIndependently) {
  FrameAuthenticator a(key_a()), b(key_a()), receiver(key_a());
  std::string body;
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(receiver.open(FrameDirection::Request, a.sign(FrameDirection::Request, "a"), body));
  // b's counter 1 is below a's 3, and still new for b's session.
  EXPECT_TRUE(receiver.open(FrameDirection::Request, b.sign(FrameDirection::Request, "b"), body));
  EXPECT_TRUE(receiver.open(FrameDirection::Request, a.sign(FrameDirection::Request, "a"), body));
  EXPECT_EQ(receiver.rejected(), 0u);
}

TEST(FrameAuth, TheReplayWindowForgetsTheLeastRecentlyUsedSession) {
  ReplayWindow window(3);
  const std::string s1 = counting_bytes(1, 16), s2 = counting_bytes(2, 16), s3 = counting_bytes(3, 16),
                    s4 = counting_bytes(4, 16);
  EXPECT_TRUE(window.accept(s1, 5));
  EXPECT_TRUE(window.accept(s2, 5));
  EXPECT_TRUE(window.accept(s3, 5));
  EXPECT_TRUE(window.accept(s1, 6));  // s1 is now the most recent; s2 the least
  EXPECT_TRUE(window.accept(s4, 1));
  EXPECT_EQ(window.sessions(), 3u);
  EXPECT_FALSE(window.accept(s1, 6));  // remembered
  EXPECT_FALSE(window.accept(s3, 5));  // remembered
  EXPECT_TRUE(window.accept(s2, 5));   // forgotten: the documented limit of a bounded window
  EXPECT_EQ(window.sessions(), 3u);

  ReplayWindow bounded;  // the default: 4096 sessions
  for (int i = 0; i < 5000; ++i) {
    std::string s(16, '\0');
    for (int b = 0; b < 4; ++b) s[b] = static_cast<char>(i >> (8 * b));
    EXPECT_TRUE(bounded.accept(s, 1));
  }
  EXPECT_EQ(bounded.sessions(), kFrameReplaySessions);
}

TEST(FrameAuth, AKeyThatIsNot32BytesIsRefused) {
  for (std::size_t n : {0, 16, 31, 33}) {
    try {
      FrameKey key(std::string(n, 'k'));
      ADD_FAILURE() << "a " << n << "-byte key was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "[ps] the frame authentication key must be 32 raw bytes, got " + std::to_string(n));
    }
  }
  EXPECT_THROW(frame_sign(key_a(), FrameDirection::Request, "short session", 1, ""), std::invalid_argument);
}

// An in-memory server socket: requests are queued by the test, replies collected.
class QueueServerSocket final : public MessageServerSocket {
 public:
  std::deque<std::pair<std::string, std::string>> requests;
  std::vector<std::pair<std::string, std::string>> replies;
  const std::string& endpoint() const override { return endpoint_; }
  bool receive(std::string& client, MessageBuffer& message, int) override {
    if (requests.empty()) return false;
    client = requests.front().first;
    message.assign(requests.front().second);
    requests.pop_front();
    return true;
  }
  void reply(const std::string& client, MessageBuffer& message) override {
    replies.emplace_back(client, std::string(message.message()));
  }

 private:
  std::string endpoint_ = "queue://test";
};

TEST(FrameAuth, TheServerDecoratorSkipsBadFramesAndSignsItsReplies) {
  auto queue = std::make_unique<QueueServerSocket>();
  QueueServerSocket* q = queue.get();
  FrameAuthenticator client(key_a()), forger(key_b());
  q->requests.emplace_back("forger", forger.sign(FrameDirection::Request, "shutdown"));
  q->requests.emplace_back("junk", "hello");
  q->requests.emplace_back("client", client.sign(FrameDirection::Request, "pull"));
  auto server = authenticate(std::move(queue), key_a());
  EXPECT_EQ(server->endpoint(), "queue://test");
  std::string from;
  MessageBuffer body;
  ASSERT_TRUE(server->receive(from, body, 1000));
  EXPECT_EQ(from, "client");
  EXPECT_EQ(body.message(), "pull");
  EXPECT_EQ(server->frames_rejected(), 2u);
  EXPECT_FALSE(server->receive(from, body, 0));  // nothing left
  // A reply without headroom is copied into a frame; one with room is signed in place, and the
  // caller's buffer comes back as it was (the same message, the same headroom).
  MessageBuffer bare;
  bare.assign("weights");
  server->reply("client", bare);
  MessageBuffer roomy;
  roomy.bytes = std::string(kMessageHeadroom, '#') + "weights";
  roomy.headroom = kMessageHeadroom;
  server->reply("client", roomy);
  EXPECT_EQ(roomy.headroom, kMessageHeadroom);
  EXPECT_EQ(roomy.message(), "weights");
  ASSERT_EQ(q->replies.size(), 2u);
  std::string opened;
  ASSERT_TRUE(client.open(FrameDirection::Reply, q->replies[0].second, opened));
  EXPECT_EQ(opened, "weights");
  ASSERT_TRUE(client.open(FrameDirection::Reply, q->replies[1].second, opened));
  EXPECT_EQ(opened, "weights");
}

// An in-memory client socket: frames sent are collected, replies queued by the test.
class QueueClientSocket final : public MessageClientSocket {
 public:
  std::vector<std::string> sent;
  std::deque<std::string> replies;
  const std::string& endpoint() const override { return endpoint_; }
  bool send(MessageBuffer& message, int) override {
    sent.emplace_back(message.message());
    return true;
  }
  bool receive(MessageBuffer& message, int) override {
    if (replies.empty()) return false;
    message.assign(replies.front());
    replies.pop_front();
    return true;
  }

 private:
  std::string endpoint_ = "queue://client";
};

TEST(FrameAuth, TheClientDecoratorSignsInPlaceAgainOnResendAndOpensRepliesInPlace) {
  auto queue = std::make_unique<QueueClientSocket>();
  QueueClientSocket* q = queue.get();
  auto client = authenticate(std::move(queue), key_a());
  MessageBuffer request;
  request.bytes = std::string(kMessageHeadroom, '\0') + "pull";
  request.headroom = kMessageHeadroom;
  ASSERT_TRUE(client->send(request, 1000));
  EXPECT_EQ(request.headroom, kMessageHeadroom);
  EXPECT_EQ(request.message(), "pull");
  ASSERT_TRUE(client->send(request, 1000));  // a resend: the buffer came back as it was
  MessageBuffer bare;
  bare.assign("stats");
  ASSERT_TRUE(client->send(bare, 1000));  // no headroom: copied into a frame
  EXPECT_EQ(bare.message(), "stats");
  ASSERT_EQ(q->sent.size(), 3u);
  FrameAuthenticator server(key_a());
  std::string body;
  ASSERT_TRUE(server.open(FrameDirection::Request, q->sent[0], body));
  EXPECT_EQ(body, "pull");
  ASSERT_TRUE(server.open(FrameDirection::Request, q->sent[1], body));  // counter 2, not a replay
  EXPECT_EQ(body, "pull");
  ASSERT_TRUE(server.open(FrameDirection::Request, q->sent[2], body));
  EXPECT_EQ(body, "stats");
  // Replies: a forged one is dropped and counted, the genuine one comes out as the body, in place.
  FrameAuthenticator forger(key_b());
  q->replies.push_back(forger.sign(FrameDirection::Reply, "weights"));
  q->replies.push_back(server.sign(FrameDirection::Reply, "weights"));
  MessageBuffer reply;
  ASSERT_TRUE(client->receive(reply, 1000));
  EXPECT_EQ(reply.message(), "weights");
  EXPECT_EQ(reply.headroom, kFrameOverheadBytes);
  EXPECT_EQ(client->frames_rejected(), 1u);
  EXPECT_FALSE(client->receive(reply, 0));
}

TEST(FrameAuth, SigningInPlaceMakesTheBytesSignMakes) {
  FrameAuthenticator a(key_a());
  FrameAuthenticator b(key_a());
  // Two authenticators have two sessions: compare each in-place frame with frame_sign's.
  MessageBuffer m;
  m.bytes = std::string(kMessageHeadroom, '\0') + "push gradients";
  m.headroom = kMessageHeadroom;
  a.sign_in_place(FrameDirection::Request, m);
  EXPECT_EQ(m.headroom, kMessageHeadroom - kFrameOverheadBytes);
  EXPECT_EQ(std::string(m.message()), frame_sign(key_a(), FrameDirection::Request, a.session(), 1, "push gradients"));
  // Opened in place: the body is what follows the header, which becomes headroom.
  ASSERT_TRUE(b.open(FrameDirection::Request, m));
  EXPECT_EQ(m.message(), "push gradients");
  EXPECT_EQ(m.headroom, kMessageHeadroom);
  // A frame that does not verify leaves the buffer alone.
  MessageBuffer forged;
  forged.assign(frame_sign(key_b(), FrameDirection::Request, a.session(), 2, "shutdown"));
  const std::string before = forged.bytes;
  EXPECT_FALSE(b.open(FrameDirection::Request, forged));
  EXPECT_EQ(forged.headroom, 0u);
  EXPECT_EQ(forged.bytes, before);
  EXPECT_EQ(b.rejected(), 1u);
  // Too little room to sign in place is refused, not written before the buffer.
  MessageBuffer cramped;
  cramped.bytes = std::string(kFrameOverheadBytes - 1, '\0') + "x";
  cramped.headroom = kFrameOverheadBytes - 1;
  EXPECT_THROW(a.sign_in_place(FrameDirection::Request, cramped), std::invalid_argument);
}

// ---- a real ParameterShardServer over ZeroMQ ------------------------------------------------------

std::string job_key() { return std::string(32, '\x5a'); }

ShardLayout one_variable() { return ShardLayout::make(1, {{"w", {4, 2}, DType::Float32}}, {1}); }

Tensor ramp() {
  Tensor t({4, 2}, DType::Float32);
  for (int i = 0; i < 8; ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

std::unique_ptr<ParameterShardServer> keyed_server(std::optional<std::string> key = job_key()) {
  ParameterServerOptions options;
  options.auth_key = std::move(key);
  return std::make_unique<ParameterShardServer>(one_variable(), 0, std::vector<Tensor>{ramp()}, SGD(0.5),
                                                "tcp://127.0.0.1:*", options);
}

template <class F>
void expect_no_answer(F&& call) {
  try {
    call();
    ADD_FAILURE() << "the request was answered";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("did not answer"), std::string::npos) << e.what();
  }
}

TEST(FrameAuthServer, OnlyAClientWithTheKeyIsAnswered) {
  SKIP_WITHOUT_ZMQ();
  auto server = keyed_server();
  const std::vector<std::string> at{server->endpoint()};
  ParameterServerClient good(one_variable(), at, 0, 5.0, job_key());
  EXPECT_TRUE(good.authenticated());
  std::vector<Tensor> values;
  EXPECT_EQ(good.pull(values), std::vector<std::uint64_t>{0});
  EXPECT_EQ(std::memcmp(values[0].raw(), ramp().raw(), values[0].nbytes()), 0);
  Tensor grad = Tensor::zeros({4, 2}, DType::Float32);
  grad.fill(1.0);
  EXPECT_EQ(good.push({grad}, {0}).status, std::vector<PsStatus>{PsStatus::Applied});

  ParameterServerClient open(one_variable(), at, 1, 0.3);
  ParameterServerClient other_key(one_variable(), at, 2, 0.3, std::string(32, 'o'));
  expect_no_answer([&] { open.pull(values); });
  expect_no_answer([&] { other_key.pull(values); });
  expect_no_answer([&] { other_key.push({grad}, {1}); });
  // Each pull was sent again on fresh connections within its timeout; every copy was dropped.
  const std::uint64_t rejected = server->stats().frames_rejected;
  EXPECT_GE(rejected, 3u);
  EXPECT_EQ(server->stats().pulls, 1u);
  EXPECT_EQ(server->stats().errors, 0u);  // dropped unread, not answered with an Error
  EXPECT_EQ(server->version(), 1u);

  // Still serving the job, and its stats say what was dropped.
  EXPECT_EQ(good.pull(values), std::vector<std::uint64_t>{1});
  EXPECT_EQ(values[0].data<float>()[0], -0.5f);
  EXPECT_GE(good.stats(0).at("frames_rejected").as_int(), static_cast<std::int64_t>(rejected));
  EXPECT_EQ(good.frames_rejected(), 0u);
}

TEST(FrameAuthServer, ControlRequestsWithoutTheKeyChangeNothing) {
  SKIP_WITHOUT_ZMQ();
  auto server = keyed_server();
  const std::vector<std::string> at{server->endpoint()};
  ParameterServerClient intruder(one_variable(), at, 7, 0.3);
  const auto dir = std::filesystem::temp_directory_path() / ("mdtrain-frame-auth-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Tensor zeros = Tensor::zeros({4, 2}, DType::Float32);
  expect_no_answer([&] { intruder.assign({zeros}); });
  expect_no_answer([&] { intruder.save(dir.string()); });
  expect_no_answer([&] { intruder.load(dir.string()); });
  expect_no_answer([&] { intruder.shutdown(); });
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_TRUE(server->serving());
  EXPECT_EQ(server->version(), 0u);
  EXPECT_EQ(std::memcmp(server->shard_values()[0].raw(), ramp().raw(), zeros.nbytes()), 0);
  EXPECT_EQ(server->stats().frames_rejected, 4u);  // sent once each: none of them is resent

  ParameterServerClient chief(one_variable(), at, 0, 5.0, job_key());
  std::vector<Tensor> values;
  chief.pull(values);
  EXPECT_EQ(std::memcmp(values[0].raw(), ramp().raw(), zeros.nbytes()), 0);
}

TEST(FrameAuthServer, AReplayedRequestIsDroppedAtTheServer) {
  SKIP_WITHOUT_ZMQ();
  auto server = keyed_server();
  auto raw = connect_zmq_client_socket(server->endpoint());
  PsHeader h;
  h.kind = PsKind::Stats;
  const std::string session = counting_bytes(0x30, 16);
  const std::string request =
      frame_sign(FrameKey(job_key()), FrameDirection::Request, session, 1, encode_ps_message(h, nullptr, 0));
  FrameAuthenticator reader{FrameKey(job_key())};
  std::string reply, body, none;
  ASSERT_TRUE(send_bytes(*raw, request, 5000));
  ASSERT_TRUE(receive_bytes(*raw, reply, 5000));
  ASSERT_TRUE(reader.open(FrameDirection::Reply, reply, body));
  EXPECT_EQ(parse_ps_message(body).header.kind, PsKind::StatsReply);
  ASSERT_TRUE(send_bytes(*raw, request, 5000));  // the same bytes again
  EXPECT_FALSE(receive_bytes(*raw, none, 300));
  EXPECT_EQ(server->stats().frames_rejected, 1u);
  // The server's reply offered back to it as a request: its tag is over direction 'R'.
  ASSERT_TRUE(send_bytes(*raw, reply, 5000));
  EXPECT_FALSE(receive_bytes(*raw, none, 300));
  EXPECT_EQ(server->stats().frames_rejected, 2u);
  // A fresh frame of the same session is still served.
  ASSERT_TRUE(
      send_bytes(*raw,
                 frame_sign(FrameKey(job_key()), FrameDirection::Request, session, 2, encode_ps_message(h, nullptr, 0)),
                 5000));
  ASSERT_TRUE(receive_bytes(*raw, reply, 5000));
  EXPECT_TRUE(reader.open(FrameDirection::Reply, reply, body));
}

TEST(FrameAuthServer, AClientWithAKeyDoesNotBelieveAServerWithoutIt) {
  SKIP_WITHOUT_ZMQ();
  auto server = keyed_server(std::nullopt);  // answers everything, with untagged replies
  ParameterServerClient client(one_variable(), {server->endpoint()}, 0, 0.3, job_key());
  std::vector<Tensor> values;
  expect_no_answer([&] { client.pull(values); });
  EXPECT_GE(client.frames_rejected(), 1u);
  EXPECT_EQ(server->stats().frames_rejected, 0u);
}

TEST(FrameAuthServer, KeysThatAreNot32BytesAreRefusedEverywhere) {
  auto expect_refused = [](auto&& make) {
    try {
      make();
      ADD_FAILURE() << "a 31-byte key was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("[ps] the frame authentication key must be 32 raw bytes, got 31"),
                std::string::npos)
          << e.what();
    }
  };
  const std::string short_key(31, 'k');
  expect_refused([&] { keyed_server(short_key); });
  expect_refused([&] { ParameterServerClient(one_variable(), {"tcp://127.0.0.1:1"}, 0, 1.0, short_key); });
  expect_refused([&] { ParameterServerWorkerStrategy(one_variable(), {"tcp://127.0.0.1:1"}, 0, 1.0, short_key); });
}

}  // namespace
}  // namespace mdtrain
