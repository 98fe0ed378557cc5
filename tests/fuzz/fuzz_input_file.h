#pragma once
// Shared by the model-file fuzz targets: the input goes to a file (the readers take paths), and a
// "repaired" copy of it gets correct checksums, so that mutations reach the JSON header and the
// layer configs instead of stopping at the first checksum.
#include <cstddef>
#include <cstdint>
#include <string>

namespace mdtrain::fuzz {

// Writes `bytes` to this process's scratch file (made once under $TMPDIR or /tmp) and returns
// its path. The file is replaced on each call and removed at exit.
const std::string& write_scratch_file(const std::uint8_t* data, std::size_t size);
const std::string& write_scratch_file(const std::string& bytes);

// `bytes` with the header checksum, and every tensor checksum whose range lies inside the file,
// recomputed (docs/file_format.md). Inputs too broken to locate a header come back unchanged.
std::string repair_checksums(const std::string& bytes);

}  // namespace mdtrain::fuzz
