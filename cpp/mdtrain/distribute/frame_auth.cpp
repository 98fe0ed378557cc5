#include "mdtrain/distribute/frame_auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <stdexcept>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {

constexpr std::string_view kDomain = "mdtrain-frame-v1";

void put_le64(std::uint64_t v, unsigned char* out) {
  for (std::size_t i = 0; i < kFrameCounterBytes; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

std::uint64_t get_le64(const char* in) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < kFrameCounterBytes; ++i) v |= std::uint64_t(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

// HMAC is fetched once per process (fetching looks the algorithm up in the providers each time).
EVP_MAC* hmac_algorithm() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  MDTRAIN_CHECK(mac, std::runtime_error, "[ps] OpenSSL has no HMAC (is its default provider missing?)");
  return mac;
}

struct MacCtxFree {
  void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
};

// HMAC-SHA256(key, domain | direction | session | counter | body) into `tag`. The body is fed
// in place (a push of every shard is megabytes: no copy to prepend the header).
void compute_tag(const std::string& key, FrameDirection direction, std::string_view session,
                 const unsigned char* counter_le, std::string_view body, unsigned char* tag) {
  std::unique_ptr<EVP_MAC_CTX, MacCtxFree> ctx(EVP_MAC_CTX_new(hmac_algorithm()));
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  const unsigned char dir = static_cast<unsigned char>(direction);
  auto bytes = [](std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); };
  std::size_t written = 0;
  const bool ok = ctx && EVP_MAC_init(ctx.get(), bytes(key), key.size(), params) == 1 &&
                  EVP_MAC_update(ctx.get(), bytes(kDomain), kDomain.size()) == 1 &&
                  EVP_MAC_update(ctx.get(), &dir, 1) == 1 &&
                  EVP_MAC_update(ctx.get(), bytes(session), session.size()) == 1 &&
                  EVP_MAC_update(ctx.get(), counter_le, kFrameCounterBytes) == 1 &&
                  EVP_MAC_update(ctx.get(), bytes(body), body.size()) == 1 &&
                  EVP_MAC_final(ctx.get(), tag, &written, kFrameTagBytes) == 1 && written == kFrameTagBytes;
  MDTRAIN_CHECK(ok, std::runtime_error, "[ps] OpenSSL failed to compute an HMAC-SHA256 frame tag");
}

std::string random_session() {
  std::random_device rd;  // getrandom() on Linux
  std::string s(kFrameSessionBytes, '\0');
  for (std::size_t i = 0; i < kFrameSessionBytes; i += 4) {
    const std::uint32_t r = rd();
    for (std::size_t b = 0; b < 4; ++b) s[i + b] = static_cast<char>(r >> (8 * b));
  }
  return s;
}

int milliseconds_left(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::max<long long>(0, left));
}

}  // namespace

FrameKey::FrameKey(std::string bytes) : bytes_(std::move(bytes)) {
  MDTRAIN_CHECK(bytes_.size() == kFrameKeyBytes, std::invalid_argument, "[ps] the frame authentication key must be ",
                kFrameKeyBytes, " raw bytes, got ", bytes_.size());
}

namespace {
// Writes the frame header for `body` into `header` (kFrameOverheadBytes; the body itself follows
// it in the frame, wherever the caller keeps it).
void write_header(const FrameKey& key, FrameDirection direction, std::string_view session, std::uint64_t counter,
                  std::string_view body, char* header) {
  MDTRAIN_CHECK(session.size() == kFrameSessionBytes, std::invalid_argument, "[ps] a frame session is ",
                kFrameSessionBytes, " bytes, got ", session.size());
  auto* out = reinterpret_cast<unsigned char*>(header);
  std::copy(session.begin(), session.end(), header + kFrameTagBytes);
  put_le64(counter, out + kFrameTagBytes + kFrameSessionBytes);
  compute_tag(key.bytes(), direction, session, out + kFrameTagBytes + kFrameSessionBytes, body, out);
}

// Writes the frame into `frame`, reusing its capacity.
void write_frame(const FrameKey& key, FrameDirection direction, std::string_view session, std::uint64_t counter,
                 std::string_view body, std::string& frame) {
  frame.resize(kFrameOverheadBytes + body.size());
  std::copy(body.begin(), body.end(), frame.begin() + kFrameOverheadBytes);
  write_header(key, direction, session, counter, std::string_view(frame).substr(kFrameOverheadBytes), frame.data());
}

// Gives back the headroom a decorator took from a caller's buffer, however the inner send ends.
struct HeadroomRestore {
  MessageBuffer& buffer;
  std::size_t headroom;
  ~HeadroomRestore() { buffer.headroom = headroom; }
};
}  // namespace

std::string frame_sign(const FrameKey& key, FrameDirection direction, std::string_view session, std::uint64_t counter,
                       std::string_view body) {
  std::string frame;
  write_frame(key, direction, session, counter, body, frame);
  return frame;
}

ReplayWindow::ReplayWindow(std::size_t max_sessions) : max_sessions_(max_sessions) {
  MDTRAIN_CHECK(max_sessions_ >= 1, std::invalid_argument, "[ps] a replay window needs room for one session");
}

bool ReplayWindow::accept(std::string_view session, std::uint64_t counter) {
  const std::string key(session);
  auto it = index_.find(key);
  if (it != index_.end()) {
    if (counter <= it->second->second) return false;
    it->second->second = counter;
    order_.splice(order_.begin(), order_, it->second);
    return true;
  }
  if (counter == 0) return false;  // counters start at 1
  if (order_.size() == max_sessions_) {
    index_.erase(order_.back().first);
    order_.pop_back();
  }
  order_.emplace_front(key, counter);
  index_.emplace(key, order_.begin());
  return true;
}

FrameAuthenticator::FrameAuthenticator(FrameKey key, std::shared_ptr<FrameRejections> rejections,
                                       std::size_t max_sessions)
    : key_(std::move(key)),
      rejections_(rejections ? std::move(rejections) : std::make_shared<FrameRejections>(0)),
      session_(random_session()),
      window_(max_sessions) {}

std::string FrameAuthenticator::sign(FrameDirection direction, std::string_view body) {
  std::string frame;
  sign_into(direction, body, frame);
  return frame;
}

void FrameAuthenticator::sign_into(FrameDirection direction, std::string_view body, std::string& frame) {
  write_frame(key_, direction, session_, next_counter_++, body, frame);
}

void FrameAuthenticator::sign_in_place(FrameDirection direction, MessageBuffer& message) {
  MDTRAIN_CHECK(message.headroom >= kFrameOverheadBytes && message.headroom <= message.bytes.size(),
                std::invalid_argument, "[ps] signing in place needs ", kFrameOverheadBytes,
                " bytes of headroom, the message has ", message.headroom);
  const std::size_t at = message.headroom - kFrameOverheadBytes;
  write_header(key_, direction, session_, next_counter_++, message.message(), message.bytes.data() + at);
  message.headroom = at;
}

bool FrameAuthenticator::open(FrameDirection direction, std::string_view frame, std::string_view& body) {
  auto reject = [&] {
    rejections_->fetch_add(1);
    return false;
  };
  if (frame.size() < kFrameOverheadBytes) return reject();
  const std::string_view session = frame.substr(kFrameTagBytes, kFrameSessionBytes);
  const std::string_view payload = frame.substr(kFrameOverheadBytes);
  const char* counter_at = frame.data() + kFrameTagBytes + kFrameSessionBytes;
  unsigned char expected[kFrameTagBytes];
  compute_tag(key_.bytes(), direction, session, reinterpret_cast<const unsigned char*>(counter_at), payload, expected);
  if (CRYPTO_memcmp(expected, frame.data(), kFrameTagBytes) != 0) return reject();
  if (!window_.accept(session, get_le64(counter_at))) return reject();
  body = payload;
  return true;
}

bool FrameAuthenticator::open(FrameDirection direction, std::string_view frame, std::string& body) {
  std::string_view view;
  if (!open(direction, frame, view)) return false;
  body.assign(view.data(), view.size());
  return true;
}

bool FrameAuthenticator::open(FrameDirection direction, MessageBuffer& message) {
  std::string_view body;
  if (!open(direction, message.message(), body)) return false;
  message.headroom += kFrameOverheadBytes;
  return true;
}

AuthenticatedServerSocket::AuthenticatedServerSocket(std::unique_ptr<MessageServerSocket> inner, FrameKey key,
                                                     std::shared_ptr<FrameRejections> rejections)
    : inner_(std::move(inner)), auth_(std::move(key), std::move(rejections)) {
  MDTRAIN_CHECK(inner_, std::invalid_argument, "[ps] no server socket to authenticate");
}

bool AuthenticatedServerSocket::receive(std::string& client, MessageBuffer& message, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(0, timeout_ms));
  for (;;) {
    if (!inner_->receive(client, message, milliseconds_left(deadline))) return false;
    if (auth_.open(FrameDirection::Request, message)) return true;
    // Dropped (counted by open); wait on for a genuine request in what is left of the timeout.
    if (milliseconds_left(deadline) == 0) return false;
  }
}

void AuthenticatedServerSocket::reply(const std::string& client, MessageBuffer& message) {
  if (message.headroom < kFrameOverheadBytes) {
    auth_.sign_into(FrameDirection::Reply, message.message(), out_.bytes);
    out_.headroom = 0;
    inner_->reply(client, out_);
    return;
  }
  HeadroomRestore restore{message, message.headroom};
  auth_.sign_in_place(FrameDirection::Reply, message);
  inner_->reply(client, message);
}

AuthenticatedClientSocket::AuthenticatedClientSocket(std::unique_ptr<MessageClientSocket> inner, FrameKey key,
                                                     std::shared_ptr<FrameRejections> rejections)
    : inner_(std::move(inner)), auth_(std::move(key), std::move(rejections)) {
  MDTRAIN_CHECK(inner_, std::invalid_argument, "[ps] no client socket to authenticate");
}

bool AuthenticatedClientSocket::send(MessageBuffer& message, int timeout_ms) {
  if (message.headroom < kFrameOverheadBytes) {
    auth_.sign_into(FrameDirection::Request, message.message(), out_.bytes);
    out_.headroom = 0;
    return inner_->send(out_, timeout_ms);
  }
  HeadroomRestore restore{message, message.headroom};
  auth_.sign_in_place(FrameDirection::Request, message);
  return inner_->send(message, timeout_ms);
}

bool AuthenticatedClientSocket::receive(MessageBuffer& message, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(0, timeout_ms));
  for (;;) {
    if (!inner_->receive(message, milliseconds_left(deadline))) return false;
    if (auth_.open(FrameDirection::Reply, message)) return true;
    if (milliseconds_left(deadline) == 0) return false;
  }
}

std::unique_ptr<AuthenticatedServerSocket> authenticate(std::unique_ptr<MessageServerSocket> inner, FrameKey key,
                                                        std::shared_ptr<FrameRejections> rejections) {
  return std::make_unique<AuthenticatedServerSocket>(std::move(inner), std::move(key), std::move(rejections));
}

std::unique_ptr<AuthenticatedClientSocket> authenticate(std::unique_ptr<MessageClientSocket> inner, FrameKey key,
                                                        std::shared_ptr<FrameRejections> rejections) {
  return std::make_unique<AuthenticatedClientSocket>(std::move(inner), std::move(key), std::move(rejections));
}

}  // namespace mdtrain
