#pragma once
// The parameter server's wire format: a fixed 56-byte little-endian header, then a payload.
//
//   offset  size  field
//        0     4  magic "MDPS"
//        4     2  protocol version (1)
//        6     2  kind (PsKind)
//        8     8  request id (chosen by the client, echoed in the reply: late replies are discarded)
//       16     4  worker task id
//       20     4  server index (the request's target; replies echo it)
//       24     4  variable index, or kAllVariables (every shard the server holds, in variable order)
//       28     1  payload dtype (PsDType)
//       29     1  status (PsStatus, push acks)
//       30     2  reserved, 0
//       32     8  weights version (push: the server version the gradient was computed on;
//                 replies: the server's version)
//       40     8  element count of the payload (bytes for PsDType::Bytes)
//       48     8  step token (push: the job-wide id of the training step, so a step retried after
//                 its worker died is applied once; 0 = none)
//       56     -  payload: exactly count * size(dtype) bytes
//
// parse_ps_message is a pure function of the bytes: anything malformed (short, foreign magic,
// other version, unknown kind/dtype/status, nonzero reserved bits, a payload of the wrong length)
// throws std::invalid_argument("[ps] ..."), which the server answers with an Error message.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mdtrain/core/dtype.h"
#include "mdtrain/distribute/message_socket.h"

namespace mdtrain {

enum class PsKind : std::uint16_t {
  Pull = 1,  // -> PullReply: the shard rows
  PullReply = 2,
  Push = 3,  // gradient rows -> PushAck (status says what happened to them)
  PushAck = 4,
  Assign = 5,  // new shard rows (initial values from the chief) -> Done
  Save = 6,    // payload: checkpoint directory -> Done
  Load = 7,    // payload: checkpoint directory -> Done
  Stats = 8,   // -> StatsReply (payload: JSON text)
  StatsReply = 9,
  Shutdown = 10,  // -> Done, then the server stops serving
  Done = 11,
  Error = 12,  // payload: the reason, text
};
const char* name_of(PsKind kind);

enum class PsDType : std::uint8_t { Bytes = 0, Float32 = 1, Float64 = 2 };

// What a server did with a pushed gradient.
enum class PsStatus : std::uint8_t {
  None = 0,
  Applied = 1,       // one optimizer step
  Rescaled = 2,      // applied after scaling by 1 / (1 + staleness)
  DroppedStale = 3,  // older than max_staleness versions
  Aggregated = 4,    // synchronous mode: kept for the step, not applied yet
  DroppedLate = 5,   // synchronous mode: its step had already been applied
  Duplicate = 6,     // its step token was handled already (a retried step): ignored
};
const char* name_of(PsStatus status);

inline constexpr std::uint32_t kPsMagic = 0x5350444Du;  // "MDPS" little-endian
inline constexpr std::uint16_t kPsProtocolVersion = 2;
inline constexpr std::size_t kPsHeaderSize = 56;
inline constexpr std::uint32_t kAllVariables = 0xFFFFFFFFu;

struct PsHeader {
  PsKind kind = PsKind::Error;
  std::uint64_t request_id = 0;
  std::uint32_t worker = 0;
  std::uint32_t server = 0;
  std::uint32_t variable = kAllVariables;
  PsDType dtype = PsDType::Bytes;
  PsStatus status = PsStatus::None;
  std::uint64_t weights_version = 0;
  std::uint64_t count = 0;
  std::uint64_t step = 0;
};

struct PsMessage {
  PsHeader header;
  std::string_view payload;  // views the parsed bytes
};

std::size_t size_of(PsDType dtype);
// Float32/Float64 only; throws std::invalid_argument for other dtypes.
PsDType ps_dtype_of(DType dtype);

// Header + payload; `header.count` is set from `payload_bytes` and the dtype.
std::string encode_ps_message(PsHeader header, const void* payload, std::size_t payload_bytes);
// Header + the concatenation of `pieces` (pointer, bytes), written once into the message (the
// shards of a pull or push are not first gathered into a buffer of their own).
std::string encode_ps_message(PsHeader header, const std::vector<std::pair<const void*, std::size_t>>& pieces);
// A message with a text payload (Error, Save/Load paths, StatsReply).
std::string encode_ps_text(PsHeader header, const std::string& text);
// The same into `out` for sending, behind kMessageHeadroom bytes of room (so an authenticating
// socket signs it in place) and reusing out's capacity (a server's reply buffer, a client's
// request buffers: no fresh allocation of megabytes per message).
void encode_ps_message(MessageBuffer& out, PsHeader header,
                       const std::vector<std::pair<const void*, std::size_t>>& pieces);
void encode_ps_message(MessageBuffer& out, PsHeader header, const void* payload, std::size_t payload_bytes);
void encode_ps_text(MessageBuffer& out, PsHeader header, const std::string& text);
// Validates every field; throws std::invalid_argument("[ps] ...") naming the first bad one.
PsMessage parse_ps_message(std::string_view bytes);

}  // namespace mdtrain
