#include "fuzz_input_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "mdtrain/core/json.h"
#include "mdtrain/model/model_file.h"

namespace mdtrain::fuzz {
namespace {

constexpr std::size_t kPrefix = 24;  // magic | version | header crc32 | header length

std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
void put_u32(char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void put_u64(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}

struct Scratch {
  std::string path;
  Scratch() {
    const char* dir = std::getenv("TMPDIR");
    std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/mdtrain_fuzz_XXXXXX";
    int fd = ::mkstemp(tmpl.data());
    if (fd < 0) std::abort();
    ::close(fd);
    path = tmpl;
  }
  ~Scratch() { ::unlink(path.c_str()); }
};

}  // namespace

const std::string& write_scratch_file(const std::uint8_t* data, std::size_t size) {
  static Scratch scratch;
  int fd = ::open(scratch.path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) std::abort();
  while (size > 0) {
    ssize_t w = ::write(fd, data, size);
    if (w <= 0) std::abort();
    data += w;
    size -= static_cast<std::size_t>(w);
  }
  ::close(fd);
  return scratch.path;
}

const std::string& write_scratch_file(const std::string& bytes) {
  return write_scratch_file(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

std::string repair_checksums(const std::string& bytes) {
  if (bytes.size() < kPrefix) return bytes;
  std::uint64_t header_len = get_u64(bytes.data() + 16);
  if (header_len > bytes.size() - kPrefix) return bytes;
  std::string text = bytes.substr(kPrefix, header_len);
  std::uint64_t payload_start = (kPrefix + header_len + 63) / 64 * 64;
  std::string payload = payload_start < bytes.size() ? bytes.substr(payload_start) : std::string();
  std::string padding =
      bytes.substr(kPrefix + header_len, std::min<std::uint64_t>(payload_start, bytes.size()) - kPrefix - header_len);
  try {
    Json header = Json::parse(text);
    if (header.is_object() && header.contains("tensors") && header.at("tensors").is_array()) {
      Json tensors = Json::array();
      for (Json entry : header.at("tensors").as_array()) {
        if (entry.is_object() && entry.contains("offset") && entry.contains("nbytes") &&
            entry.at("offset").is_number() && entry.at("nbytes").is_number()) {
          double offset = entry.at("offset").as_number(), nbytes = entry.at("nbytes").as_number();
          if (offset >= 0 && nbytes >= 0 && offset + nbytes <= static_cast<double>(payload.size())) {
            auto o = static_cast<std::size_t>(offset), n = static_cast<std::size_t>(nbytes);
            entry.set("crc32", Json(static_cast<std::uint64_t>(crc32(payload.data() + o, n))));
          }
        }
        tensors.push_back(entry);
      }
      header.set("tensors", tensors);
      text = header.dump();
      padding.assign((64 - (kPrefix + text.size()) % 64) % 64, '\0');
    }
  } catch (const std::invalid_argument&) {
    // Not JSON: only the header checksum is repaired.
  }
  std::string out = bytes.substr(0, kPrefix) + text + padding + payload;
  put_u32(out.data() + 12, crc32(text.data(), text.size()));
  put_u64(out.data() + 16, text.size());
  return out;
}

}  // namespace mdtrain::fuzz
