// The parameter server's wire format: round trip, and every malformed field refused with
// std::invalid_argument (never another exception, never a crash), also under random corruption.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/strategy/parameter_server/ps_message.h"

namespace mdtrain {
namespace {

PsHeader push_header() {
  PsHeader h;
  h.kind = PsKind::Push;
  h.request_id = 77;
  h.worker = 3;
  h.server = 1;
  h.dtype = PsDType::Float32;
  h.weights_version = 12;
  h.step = 0x0102030405060708ull;
  return h;
}

const std::vector<float> kPushGradient{1.f, 2.f, 3.f};

std::string valid_push() {
  return encode_ps_message(push_header(), kPushGradient.data(), kPushGradient.size() * sizeof(float));
}

void expect_refused(const std::string& bytes, const std::string& fragment) {
  try {
    parse_ps_message(bytes);
    ADD_FAILURE() << "accepted a message that should be refused for: " << fragment;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[ps] ", 0), 0u) << e.what();
  }
}

TEST(PsMessage, RoundTripKeepsEveryField) {
  const std::string bytes = valid_push();
  ASSERT_EQ(bytes.size(), kPsHeaderSize + 12);
  const PsMessage m = parse_ps_message(bytes);
  EXPECT_EQ(m.header.kind, PsKind::Push);
  EXPECT_EQ(m.header.request_id, 77u);
  EXPECT_EQ(m.header.worker, 3u);
  EXPECT_EQ(m.header.server, 1u);
  EXPECT_EQ(m.header.variable, kAllVariables);
  EXPECT_EQ(m.header.dtype, PsDType::Float32);
  EXPECT_EQ(m.header.weights_version, 12u);
  EXPECT_EQ(m.header.count, 3u);
  EXPECT_EQ(m.header.step, 0x0102030405060708ull);
  ASSERT_EQ(m.payload.size(), 12u);
  float f[3];
  std::memcpy(f, m.payload.data(), 12);
  EXPECT_EQ(f[2], 3.f);
}

TEST(PsMessage, TextMessagesCarryTheirText) {
  PsHeader h;
  h.kind = PsKind::Error;
  const std::string bytes = encode_ps_text(h, "no such variable");  // the message views these bytes
  const PsMessage m = parse_ps_message(bytes);
  EXPECT_EQ(std::string(m.payload), "no such variable");
  EXPECT_EQ(m.header.dtype, PsDType::Bytes);
}

TEST(PsMessage, EncodingIntoABufferLeavesHeadroomAndMakesTheSameBytes) {
  // A reused buffer full of other bytes (a larger earlier message): nothing of them may remain.
  MessageBuffer out;
  out.bytes.assign(4096, '\xff');
  encode_ps_message(out, push_header(), kPushGradient.data(), kPushGradient.size() * sizeof(float));
  EXPECT_EQ(out.headroom, kMessageHeadroom);
  EXPECT_EQ(out.message(), valid_push());
  EXPECT_GE(out.bytes.capacity(), 4096u);  // the capacity is kept for the next large message
  PsHeader e;
  e.kind = PsKind::Error;
  encode_ps_text(out, e, "no such variable");
  EXPECT_EQ(out.message(), encode_ps_text(e, "no such variable"));
  EXPECT_EQ(std::string(parse_ps_message(out.message()).payload), "no such variable");
}

TEST(PsMessage, EachMalformedFieldIsRefusedNamingIt) {
  const std::string good = valid_push();
  expect_refused("", "shorter than the 56-byte header");
  expect_refused(good.substr(0, 55), "shorter than the 56-byte header");
  std::string b = good;
  b[0] = 'X';
  expect_refused(b, "bad magic");
  b = good;
  b[4] = 1;
  expect_refused(b, "protocol version 1");
  b = good;
  b[6] = 99;
  expect_refused(b, "unknown message kind 99");
  b = good;
  b[6] = 0;
  expect_refused(b, "unknown message kind 0");
  b = good;
  b[28] = 7;
  expect_refused(b, "unknown payload dtype 7");
  b = good;
  b[29] = 7;
  expect_refused(b, "unknown push status 7");
  b = good;
  b[31] = 1;
  expect_refused(b, "reserved header bytes");
  expect_refused(good.substr(0, good.size() - 1), "announces 3 elements of 4 bytes but the payload has 11");
  expect_refused(good + "abcd", "payload has 16 bytes");
  b = good;
  b[47] = static_cast<char>(0x80);  // count = 2^63 + 3: must not wrap into a match
  expect_refused(b, "announces");
}

TEST(PsMessage, RandomCorruptionIsRefusedOrParsedNeverAnythingElse) {
  const std::string good = valid_push();
  std::mt19937 rng(1234);
  int refused = 0, parsed = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string b = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 3) {
        case 0: b[rng() % b.size()] = static_cast<char>(rng()); break;
        case 1: b.resize(rng() % (b.size() + 1)); break;
        default: b.push_back(static_cast<char>(rng())); break;
      }
      if (b.empty()) b.push_back('\0');
    }
    try {
      const PsMessage m = parse_ps_message(b);
      EXPECT_EQ(m.payload.size(), m.header.count * size_of(m.header.dtype));
      ++parsed;
    } catch (const std::invalid_argument&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(parsed, 0);  // edits inside the payload or ids keep a valid message
}

}  // namespace
}  // namespace mdtrain
