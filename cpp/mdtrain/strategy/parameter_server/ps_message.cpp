#include "mdtrain/strategy/parameter_server/ps_message.h"

#include <cstring>
#include <stdexcept>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {

template <class T>
void put(char* at, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    at[i] = static_cast<char>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xFF);
}

template <class T>
T get(const char* at) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(at[i])) << (8 * i);
  return static_cast<T>(v);
}

bool known_kind(std::uint16_t k) { return k >= 1 && k <= 12; }

}  // namespace

const char* name_of(PsKind kind) {
  switch (kind) {
    case PsKind::Pull: return "pull";
    case PsKind::PullReply: return "pull reply";
    case PsKind::Push: return "push";
    case PsKind::PushAck: return "push ack";
    case PsKind::Assign: return "assign";
    case PsKind::Save: return "save";
    case PsKind::Load: return "load";
    case PsKind::Stats: return "stats";
    case PsKind::StatsReply: return "stats reply";
    case PsKind::Shutdown: return "shutdown";
    case PsKind::Done: return "done";
    case PsKind::Error: return "error";
  }
  return "?";
}

const char* name_of(PsStatus status) {
  switch (status) {
    case PsStatus::None: return "none";
    case PsStatus::Applied: return "applied";
    case PsStatus::Rescaled: return "rescaled";
    case PsStatus::DroppedStale: return "dropped (stale)";
    case PsStatus::Aggregated: return "aggregated";
    case PsStatus::DroppedLate: return "dropped (late)";
    case PsStatus::Duplicate: return "duplicate";
  }
  return "?";
}

std::size_t size_of(PsDType dtype) {
  switch (dtype) {
    case PsDType::Bytes: return 1;
    case PsDType::Float32: return 4;
    case PsDType::Float64: return 8;
  }
  return 0;
}

PsDType ps_dtype_of(DType dtype) {
  if (dtype == DType::Float32) return PsDType::Float32;
  if (dtype == DType::Float64) return PsDType::Float64;
  fail<std::invalid_argument>("[ps] parameter server variables must be float32 or float64, got ", name_of(dtype));
}

namespace {
// Writes header + pieces into out[at, ...), resizing `out` to end there.
void write_ps_message(std::string& out, std::size_t at, PsHeader header,
                      const std::vector<std::pair<const void*, std::size_t>>& pieces) {
  std::size_t payload_bytes = 0;
  for (const auto& piece : pieces) payload_bytes += piece.second;
  const std::size_t element = size_of(header.dtype);
  MDTRAIN_CHECK(payload_bytes % element == 0, std::invalid_argument, "[ps] payload of ", payload_bytes,
                " bytes is not a whole number of elements");
  header.count = payload_bytes / element;
  // resize keeps the capacity of a reused buffer; the header's bytes are all written below.
  out.resize(at + kPsHeaderSize + payload_bytes);
  char* p = out.data() + at;
  put<std::uint32_t>(p + 0, kPsMagic);
  put<std::uint16_t>(p + 4, kPsProtocolVersion);
  put<std::uint16_t>(p + 6, static_cast<std::uint16_t>(header.kind));
  put<std::uint64_t>(p + 8, header.request_id);
  put<std::uint32_t>(p + 16, header.worker);
  put<std::uint32_t>(p + 20, header.server);
  put<std::uint32_t>(p + 24, header.variable);
  put<std::uint8_t>(p + 28, static_cast<std::uint8_t>(header.dtype));
  put<std::uint8_t>(p + 29, static_cast<std::uint8_t>(header.status));
  put<std::uint16_t>(p + 30, 0);
  put<std::uint64_t>(p + 32, header.weights_version);
  put<std::uint64_t>(p + 40, header.count);
  put<std::uint64_t>(p + 48, header.step);
  char* to = p + kPsHeaderSize;
  for (const auto& [data, bytes] : pieces) {
    if (bytes) std::memcpy(to, data, bytes);
    to += bytes;
  }
}
}  // namespace

std::string encode_ps_message(PsHeader header, const std::vector<std::pair<const void*, std::size_t>>& pieces) {
  std::string out;
  write_ps_message(out, 0, header, pieces);
  return out;
}

std::string encode_ps_message(PsHeader header, const void* payload, std::size_t payload_bytes) {
  return encode_ps_message(header, {{payload, payload_bytes}});
}

std::string encode_ps_text(PsHeader header, const std::string& text) {
  header.dtype = PsDType::Bytes;
  return encode_ps_message(header, text.data(), text.size());
}

void encode_ps_message(MessageBuffer& out, PsHeader header,
                       const std::vector<std::pair<const void*, std::size_t>>& pieces) {
  write_ps_message(out.bytes, kMessageHeadroom, header, pieces);
  out.headroom = kMessageHeadroom;
}

void encode_ps_message(MessageBuffer& out, PsHeader header, const void* payload, std::size_t payload_bytes) {
  encode_ps_message(out, header, {{payload, payload_bytes}});
}

void encode_ps_text(MessageBuffer& out, PsHeader header, const std::string& text) {
  header.dtype = PsDType::Bytes;
  encode_ps_message(out, header, text.data(), text.size());
}

PsMessage parse_ps_message(std::string_view bytes) {
  MDTRAIN_CHECK(bytes.size() >= kPsHeaderSize, std::invalid_argument, "[ps] message of ", bytes.size(),
                " bytes is shorter than the ", kPsHeaderSize, "-byte header");
  const char* p = bytes.data();
  MDTRAIN_CHECK(get<std::uint32_t>(p) == kPsMagic, std::invalid_argument,
                "[ps] not a parameter server message (bad magic)");
  const auto version = get<std::uint16_t>(p + 4);
  MDTRAIN_CHECK(version == kPsProtocolVersion, std::invalid_argument, "[ps] protocol version ", version,
                " is not supported (this build speaks ", kPsProtocolVersion, ")");
  const auto kind = get<std::uint16_t>(p + 6);
  MDTRAIN_CHECK(known_kind(kind), std::invalid_argument, "[ps] unknown message kind ", kind);
  const auto dtype = get<std::uint8_t>(p + 28);
  MDTRAIN_CHECK(dtype <= 2, std::invalid_argument, "[ps] unknown payload dtype ", int(dtype));
  const auto status = get<std::uint8_t>(p + 29);
  MDTRAIN_CHECK(status <= 6, std::invalid_argument, "[ps] unknown push status ", int(status));
  MDTRAIN_CHECK(get<std::uint16_t>(p + 30) == 0, std::invalid_argument, "[ps] reserved header bytes are not zero");
  PsMessage m;
  m.header.kind = static_cast<PsKind>(kind);
  m.header.request_id = get<std::uint64_t>(p + 8);
  m.header.worker = get<std::uint32_t>(p + 16);
  m.header.server = get<std::uint32_t>(p + 20);
  m.header.variable = get<std::uint32_t>(p + 24);
  m.header.dtype = static_cast<PsDType>(dtype);
  m.header.status = static_cast<PsStatus>(status);
  m.header.weights_version = get<std::uint64_t>(p + 32);
  m.header.count = get<std::uint64_t>(p + 40);
  m.header.step = get<std::uint64_t>(p + 48);
  const std::size_t payload = bytes.size() - kPsHeaderSize;
  const std::size_t element = size_of(m.header.dtype);
  // Compared by division so a huge count cannot overflow into a match.
  MDTRAIN_CHECK(payload % element == 0 && payload / element == m.header.count, std::invalid_argument,
                "[ps] header announces ", m.header.count, " elements of ", element, " bytes but the payload has ",
                payload, " bytes");
  m.payload = bytes.substr(kPsHeaderSize);
  return m;
}

}  // namespace mdtrain
