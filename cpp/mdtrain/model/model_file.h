#pragma once
// The model file: one file holding a model's architecture, compile config, weights and optimizer
// state, read and written by both the C++ API and Python. The byte layout is specified in
// docs/file_format.md; this is the only code that knows it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain {

struct NamedTensor {
  std::string name;  // e.g. "dense/kernel"; unique within its group
  Tensor value;
};

struct ModelFile {
  Json model;                        // architecture, as the model layer writes it (opaque here)
  Json compile;                      // loss/optimizer/metrics config, or null when not compiled
  Json metadata = Json::object();    // free-form, e.g. {"mdtrain_version": "0.1.0", "epoch": 3}
  std::vector<NamedTensor> weights;  // in model order
  std::vector<NamedTensor> optimizer_state;
};

// The format version this build writes; it reads this version and older ones.
constexpr std::uint32_t kModelFileVersion = 1;

// Writes `file` to `path` atomically (see core/atomic_file.h): a crash mid-save leaves the
// previous file intact. Tensors must be on the CPU with dtype float32, float64, int32, int64 or
// uint8, and names must be non-empty and unique within a group; violations raise
// std::invalid_argument("[model_file] ...") before anything is written. I/O failures raise
// std::runtime_error("[io] ...").
void save_model_file(const std::string& path, const ModelFile& file);

// Reads and fully validates a model file (every tensor's CRC32 included); tensors come back as
// fresh CPU tensors, in file order.
//   missing file              -> std::runtime_error("[model_file] '<path>' not found")
//   not a regular file        -> std::runtime_error("[model_file] cannot read '<path>': it is a
//                                named pipe (FIFO), not a regular file"), without blocking
//   other read failures       -> std::runtime_error("[model_file] cannot read '<path>': <reason>")
//   newer format version      -> std::invalid_argument("[model_file] '<path>' has format version N ...")
//   anything malformed        -> std::invalid_argument("[model_file] '<path>' is corrupt: <what>")
//   valid but too large for memory -> AllocationError("[model_file] cannot load '<path>': ...")
// A damaged or hostile file never crashes the process and never allocates more than its own size:
// sizes are checked against the file (a header of at most 64 MiB), and checksums verified through
// a small buffer, before the header or any tensor is read into memory (tests/fuzz/ fuzzes this).
// The holes of a sparse file are not read (they are zeros), so a huge sparse file fails its
// checks in milliseconds; one that passes them is then too large for memory (AllocationError,
// from the large-allocation check of core/host_memory.h) rather than read for minutes.
ModelFile load_model_file(const std::string& path);

// CRC-32 as zlib.crc32 computes it (IEEE 802.3, reflected, init and final xor 0xFFFFFFFF);
// pass the previous result as `crc` to continue a running checksum. Used for the file's header
// and tensor checksums, so Python can verify them with zlib.crc32.
std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc = 0);
// crc32 of `n` zero bytes continuing `crc`, in O(log n) without touching them (a sparse file's holes).
std::uint32_t crc32_of_zeros(std::uint64_t n, std::uint32_t crc = 0);

}  // namespace mdtrain
