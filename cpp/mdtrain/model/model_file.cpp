#include "mdtrain/model/model_file.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>
#include <set>
#include <stdexcept>
#include <vector>

#include "mdtrain/core/atomic_file.h"
#include "mdtrain/core/errors.h"

namespace mdtrain {

// Tensor payloads are stored as the host's bytes; the format says little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "model_file.cpp stores tensors in host byte order, which must be little-endian");

namespace {

constexpr char kMagic[8] = {'M', 'D', 'T', 'R', 'A', 'I', 'N', '\0'};
constexpr std::size_t kPrefixSize = 24;  // magic | version u32 | header crc32 u32 | header length u64
constexpr std::uint64_t kAlign = 64;
constexpr std::uint64_t kCrcChunk = 1 << 20;  // buffer for checksumming before allocating
// The header is JSON: the architecture and one entry per tensor, a few MB for the largest models.
// A longer one is damage (or a sparse file's hole), refused before it is checksummed or read.
constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{64} << 20;
constexpr const char* kFormatName = "mdtrain.model";
constexpr const char* kWeightsGroup = "weights";
constexpr const char* kOptimizerGroup = "optimizer";

constexpr DType kAllDTypes[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::UInt8};

std::uint64_t round_up(std::uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

void put_u32(char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
void put_u64(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Slicing-by-8 tables: table[k][b] is the CRC of byte b followed by k zero bytes, which lets the
// main loop fold eight input bytes per step (several GB/s instead of a few hundred MB/s).
struct Crc32Tables {
  std::uint32_t t[8][256];
  Crc32Tables() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (int k = 1; k < 8; ++k)
      for (int i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  }
};

// ---- reading helpers --------------------------------------------------------------------------

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    std::string why;
    bool missing = false;
    fd_ = open_regular_file(path, size_, why, missing);
    if (fd_ < 0) {
      if (missing) fail<IoError>("[model_file] '", path, "' not found");
      fail<IoError>("[model_file] cannot read '", path, "': ", why);
    }
  }
  ~Reader() { ::close(fd_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  std::uint64_t size() const { return size_; }

  // Callers have checked that [offset, offset + n) lies inside the file.
  void read(std::uint64_t offset, void* dst, std::size_t n) const {
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        io_error(errno);
      }
      if (r == 0) corrupt("file shrank while being read");
      p += r;
      n -= static_cast<std::size_t>(r);
      offset += static_cast<std::uint64_t>(r);
    }
  }

  // Checks that the padding in [begin, end) is all zero: then every byte of the file is covered
  // by a check, and any damaged byte is reported. Holes of a sparse file are zeros: skipped.
  void expect_zeros(std::uint64_t begin, std::uint64_t end) const {
    for_each_extent(
        begin, end, [](std::uint64_t, std::uint64_t) {},
        [&](std::uint64_t at, const char* bytes, std::size_t n) {
          for (std::size_t i = 0; i < n; ++i)
            if (bytes[i] != 0) corrupt(cat("non-zero padding byte at offset ", at + i));
        });
  }

  // CRC-32 of [offset, offset + n), read through a fixed-size buffer: checksums are verified
  // before anything the size of the data is allocated. Callers have checked the range. The holes
  // of a sparse file are not read but accounted as the zeros they are (crc32_of_zeros): a 64 GiB
  // file made by `truncate` is checked in milliseconds, not minutes of reading zeros. Should the
  // file change meanwhile, the checksum of the bytes actually loaded (read_model_file) differs.
  std::uint32_t crc_of(std::uint64_t offset, std::uint64_t n) const {
    std::uint32_t crc = 0;
    for_each_extent(
        offset, offset + n, [&](std::uint64_t, std::uint64_t len) { crc = crc32_of_zeros(len, crc); },
        [&](std::uint64_t, const char* bytes, std::size_t k) { crc = crc32(bytes, k, crc); });
    return crc;
  }

  const std::string& path() const { return path_; }

  template <class... Args>
  [[noreturn]] void corrupt(Args&&... what) const {
    fail<std::invalid_argument>("[model_file] '", path_, "' is corrupt: ", std::forward<Args>(what)...);
  }

 private:
  // Walks [begin, end) in order: a hole of a sparse file goes to on_hole(offset, length) unread;
  // data is read through one buffer of at most kCrcChunk bytes and goes to on_data(offset, bytes,
  // length), a chunk at a time.
  template <class OnHole, class OnData>
  void for_each_extent(std::uint64_t begin, std::uint64_t end, OnHole&& on_hole, OnData&& on_data) const {
    std::vector<char> buf;
    while (begin < end) {
      const std::uint64_t data = next_data(begin, end);
      if (data > begin) {
        on_hole(begin, data - begin);
        begin = data;
        continue;
      }
      if (buf.empty()) buf.resize(static_cast<std::size_t>(std::min<std::uint64_t>(end - begin, kCrcChunk)));
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(
          {end - begin, next_hole(begin, end) - begin, static_cast<std::uint64_t>(buf.size())}));
      read(begin, buf.data(), n);
      on_data(begin, buf.data(), n);
      begin += n;
    }
  }

  // The first byte in [pos, end) that may hold data (end: only a hole follows). Without
  // SEEK_DATA support (or on any error) every byte is data.
  std::uint64_t next_data(std::uint64_t pos, std::uint64_t end) const {
    const off_t d = ::lseek(fd_, static_cast<off_t>(pos), SEEK_DATA);
    if (d < 0) return errno == ENXIO ? end : pos;
    return std::max(pos, std::min(end, static_cast<std::uint64_t>(d)));
  }
  // Where the data from `pos` (a data byte) ends: the next hole, or `end`. Always past `pos`.
  std::uint64_t next_hole(std::uint64_t pos, std::uint64_t end) const {
    const off_t h = ::lseek(fd_, static_cast<off_t>(pos), SEEK_HOLE);
    if (h < 0 || static_cast<std::uint64_t>(h) <= pos) return end;
    return std::min(end, static_cast<std::uint64_t>(h));
  }

  [[noreturn]] void io_error(int err) const {
    fail<IoError>("[model_file] cannot read '", path_, "': ", std::strerror(err));
  }

  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

struct TensorEntry {
  std::string name;
  bool optimizer = false;
  DType dtype = DType::Float32;
  Shape shape;
  std::uint64_t offset = 0;
  std::uint64_t nbytes = 0;
  std::uint32_t crc = 0;
};

TensorEntry parse_entry(const Reader& file, const Json& e, std::size_t index) {
  std::string where = cat("tensor entry #", index);
  if (!e.is_object()) file.corrupt(where, " is not an object");
  auto field = [&](const char* key) -> const Json& {
    if (!e.contains(key)) file.corrupt(where, " has no '", key, "'");
    return e.at(key);
  };
  // Non-negative integers that a double holds exactly; anything else is damage, not a value.
  auto count = [&](const Json& v, const std::string& what) -> std::uint64_t {
    constexpr double kExact = 9007199254740992.0;  // 2^53
    if (!v.is_number() || !(v.as_number() >= 0) || v.as_number() > kExact ||
        v.as_number() != static_cast<double>(static_cast<std::uint64_t>(v.as_number())))
      file.corrupt(where, ": ", what, " must be a non-negative integer, got ", v.dump());
    return static_cast<std::uint64_t>(v.as_number());
  };

  TensorEntry t;
  const Json& name = field("name");
  if (!name.is_string() || name.as_string().empty()) file.corrupt(where, ": 'name' must be a non-empty string");
  t.name = name.as_string();
  where = cat("tensor '", t.name, "'");

  const Json& group = field("group");
  if (group == Json(kWeightsGroup)) t.optimizer = false;
  else if (group == Json(kOptimizerGroup)) t.optimizer = true;
  else file.corrupt(where, " has unknown group ", group.dump(), " (expected \"weights\" or \"optimizer\")");

  const Json& dtype = field("dtype");
  bool known = false;
  for (DType d : kAllDTypes)
    if (dtype == Json(name_of(d))) {
      t.dtype = d;
      known = true;
    }
  if (!known) file.corrupt(where, " has unknown dtype ", dtype.dump());

  const Json& shape = field("shape");
  if (!shape.is_array()) file.corrupt(where, ": 'shape' must be an array");
  if (shape.size() > 64) file.corrupt(where, ": shape has ", shape.size(), " dimensions");
  bool has_zero = false;
  for (const Json& d : shape.as_array()) {
    std::uint64_t n = count(d, "each shape dimension");
    t.shape.push_back(static_cast<std::int64_t>(n));
    has_zero = has_zero || n == 0;
  }
  std::uint64_t elements = has_zero ? 0 : 1;
  bool overflow = false;
  for (auto n : t.shape) {
    if (has_zero) break;
    auto u = static_cast<std::uint64_t>(n);
    if (elements > std::numeric_limits<std::uint64_t>::max() / u) overflow = true;
    else elements *= u;
  }

  t.offset = count(field("offset"), "'offset'");
  t.nbytes = count(field("nbytes"), "'nbytes'");
  std::uint64_t crc = count(field("crc32"), "'crc32'");
  if (crc > 0xFFFFFFFFu) file.corrupt(where, ": 'crc32' ", crc, " does not fit 32 bits");
  t.crc = static_cast<std::uint32_t>(crc);

  std::uint64_t elem = size_of(t.dtype);
  if (overflow || elements > std::numeric_limits<std::uint64_t>::max() / elem || elements * elem != t.nbytes)
    file.corrupt(where, ": shape ", to_string(t.shape), " of ", name_of(t.dtype), " does not match ", t.nbytes,
                 " bytes");
  if (t.offset % kAlign != 0) file.corrupt(where, ": offset ", t.offset, " is not a multiple of ", kAlign);
  return t;
}

}  // namespace

std::uint32_t crc32_of_zeros(std::uint64_t n, std::uint32_t crc) {
  // Feeding a zero byte to the CRC register is a linear map over GF(2) (a 32 x 32 bit matrix:
  // column i the image of bit i); n zero bytes are its n-th power, by squaring (zlib's
  // crc32_combine does the same).
  static const Crc32Tables tables;
  using Matrix = std::array<std::uint32_t, 32>;
  auto apply = [](const Matrix& m, std::uint32_t v) {
    std::uint32_t r = 0;
    for (int i = 0; v != 0; ++i, v >>= 1)
      if (v & 1) r ^= m[static_cast<std::size_t>(i)];
    return r;
  };
  Matrix op;
  for (int i = 0; i < 32; ++i) {
    const std::uint32_t bit = std::uint32_t{1} << i;
    op[static_cast<std::size_t>(i)] = tables.t[0][bit & 0xFF] ^ (bit >> 8);
  }
  std::uint32_t reg = ~crc;
  while (n != 0) {
    if (n & 1) reg = apply(op, reg);
    n >>= 1;
    if (n == 0) break;
    Matrix squared;
    for (std::size_t i = 0; i < 32; ++i) squared[i] = apply(op, op[i]);
    op = squared;
  }
  return ~reg;
}

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc) {
  static const Crc32Tables tables;
  const auto& t = tables.t;
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  while (size >= 8) {
    std::uint32_t lo = (static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                        static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24) ^
                       crc;
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][p[4]] ^
          t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    size -= 8;
  }
  while (size--) crc = t[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

void save_model_file(const std::string& path, const ModelFile& file) {
  struct Item {
    const NamedTensor* tensor;
    const char* group;
  };
  std::vector<Item> items;
  for (const auto& t : file.weights) items.push_back({&t, kWeightsGroup});
  for (const auto& t : file.optimizer_state) items.push_back({&t, kOptimizerGroup});

  // Validate everything before touching the disk.
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& item : items) {
    const NamedTensor& t = *item.tensor;
    MDTRAIN_CHECK(!t.name.empty(), std::invalid_argument, "[model_file] a tensor in group '", item.group,
                  "' has an empty name");
    MDTRAIN_CHECK(seen.emplace(item.group, t.name).second, std::invalid_argument,
                  "[model_file] duplicate tensor name '", t.name, "' in group '", item.group, "'");
    MDTRAIN_CHECK(t.value.defined(), std::invalid_argument, "[model_file] tensor '", t.name, "' is undefined");
    MDTRAIN_CHECK(t.value.device().is_cpu(), std::invalid_argument, "[model_file] tensor '", t.name, "' is on ",
                  t.value.device().to_string(), "; copy it to the CPU first");
  }

  Json tensors = Json::array();
  std::uint64_t cursor = 0;  // payload offset of the next tensor
  for (const auto& item : items) {
    const Tensor& v = item.tensor->value;
    Json shape = Json::array();
    for (auto d : v.shape()) shape.push_back(Json(d));
    Json entry = Json::object();
    entry.set("name", item.tensor->name);
    entry.set("group", item.group);
    entry.set("dtype", name_of(v.dtype()));
    entry.set("shape", std::move(shape));
    entry.set("offset", Json(static_cast<std::uint64_t>(cursor)));
    entry.set("nbytes", Json(static_cast<std::uint64_t>(v.nbytes())));
    entry.set("crc32", Json(static_cast<std::uint64_t>(crc32(v.raw(), v.nbytes()))));
    tensors.push_back(std::move(entry));
    cursor = round_up(cursor + v.nbytes());
  }

  Json header = Json::object();
  header.set("format", kFormatName);
  header.set("model", file.model);
  header.set("compile", file.compile);
  header.set("metadata", file.metadata);
  header.set("tensors", std::move(tensors));
  const std::string text = header.dump();

  char prefix[kPrefixSize];
  std::memcpy(prefix, kMagic, sizeof(kMagic));
  put_u32(prefix + 8, kModelFileVersion);
  put_u32(prefix + 12, crc32(text.data(), text.size()));
  put_u64(prefix + 16, text.size());

  write_file_atomically(path, [&](std::ostream& out) {
    static const char zeros[kAlign] = {};
    out.write(prefix, kPrefixSize);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::uint64_t end = kPrefixSize + text.size();
    out.write(zeros, static_cast<std::streamsize>(round_up(end) - end));
    std::uint64_t written = 0;  // payload bytes so far
    for (const auto& item : items) {
      const Tensor& v = item.tensor->value;
      out.write(zeros, static_cast<std::streamsize>(round_up(written) - written));
      written = round_up(written);
      out.write(static_cast<const char*>(v.raw()), static_cast<std::streamsize>(v.nbytes()));
      written += v.nbytes();
    }
  });
}

namespace {

ModelFile read_model_file(const Reader& file) {
  const std::string& path = file.path();
  const std::uint64_t size = file.size();
  if (size < kPrefixSize) file.corrupt("file is ", size, " bytes, shorter than the ", kPrefixSize, "-byte prefix");
  char prefix[kPrefixSize];
  file.read(0, prefix, kPrefixSize);
  if (std::memcmp(prefix, kMagic, sizeof(kMagic)) != 0) file.corrupt("bad magic bytes (not an mdtrain model file)");
  std::uint32_t version = get_u32(prefix + 8);
  if (version == 0) file.corrupt("format version 0");
  MDTRAIN_CHECK(version <= kModelFileVersion, std::invalid_argument, "[model_file] '", path, "' has format version ",
                version, "; this mdtrain reads versions up to ", kModelFileVersion, " (upgrade mdtrain to read it)");
  std::uint32_t header_crc = get_u32(prefix + 12);
  std::uint64_t header_len = get_u64(prefix + 16);
  if (header_len > size - kPrefixSize) file.corrupt("header length ", header_len, " exceeds the ", size, "-byte file");
  if (header_len > kMaxHeaderBytes)
    file.corrupt("header length ", header_len, " exceeds the ", kMaxHeaderBytes >> 20, " MiB a header may have");

  // Checksummed before it is read into memory: a header length that only a sparse or damaged
  // file satisfies fails here without allocating it.
  if (file.crc_of(kPrefixSize, header_len) != header_crc) file.corrupt("header checksum mismatch");
  std::string text(static_cast<std::size_t>(header_len), '\0');
  file.read(kPrefixSize, text.data(), text.size());
  if (crc32(text.data(), text.size()) != header_crc) file.corrupt("header changed while being read");
  const std::uint64_t payload_start = round_up(kPrefixSize + header_len);

  Json header;
  try {
    header = Json::parse(text);
  } catch (const std::invalid_argument& e) {
    file.corrupt("header is not valid JSON: ", e.what());
  }
  if (!header.is_object()) file.corrupt("header is not a JSON object");
  if (header.get("format", Json()) != Json(kFormatName))
    file.corrupt("header 'format' is ", header.get("format", Json()).dump(), ", expected \"", kFormatName, "\"");
  if (!header.contains("model")) file.corrupt("header has no 'model'");
  if (!header.contains("tensors") || !header.at("tensors").is_array()) file.corrupt("header has no 'tensors' array");

  std::vector<TensorEntry> entries;
  const auto& list = header.at("tensors").as_array();
  std::uint64_t payload_end = 0;
  std::set<std::pair<bool, std::string>> seen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    TensorEntry t = parse_entry(file, list[i], i);
    if (!seen.emplace(t.optimizer, t.name).second) file.corrupt("duplicate tensor name '", t.name, "'");
    if (t.offset < payload_end)
      file.corrupt("tensor '", t.name, "' at offset ", t.offset, " overlaps the previous tensor");
    payload_end = t.offset + t.nbytes;  // both below 2^53: cannot overflow
    entries.push_back(std::move(t));
  }
  const std::uint64_t expected_size = payload_start + payload_end;
  if (size < expected_size)
    file.corrupt("file is ", size, " bytes but its header describes ", expected_size, " (truncated?)");
  if (size > expected_size) file.corrupt(size - expected_size, " unexpected bytes after the last tensor");

  // Every padding byte and every tensor's checksum are verified before any tensor is allocated,
  // so a damaged file (say a sparse one whose header describes gigabytes of holes) costs a read
  // through a small buffer, not memory the size of its tensors.
  file.expect_zeros(kPrefixSize + header_len, payload_start);
  std::uint64_t previous_end = 0;
  for (const TensorEntry& t : entries) {
    file.expect_zeros(payload_start + previous_end, payload_start + t.offset);
    if (file.crc_of(payload_start + t.offset, t.nbytes) != t.crc)
      file.corrupt("checksum mismatch in tensor '", t.name, "'");
    previous_end = t.offset + t.nbytes;
  }

  ModelFile result;
  result.model = header.at("model");
  result.compile = header.get("compile", Json());
  result.metadata = header.contains("metadata") ? header.at("metadata") : Json::object();
  for (const TensorEntry& t : entries) {
    Tensor value(t.shape, t.dtype);
    file.read(payload_start + t.offset, value.raw(), static_cast<std::size_t>(t.nbytes));
    if (crc32(value.raw(), value.nbytes()) != t.crc) file.corrupt("tensor '", t.name, "' changed while being read");
    auto& group = t.optimizer ? result.optimizer_state : result.weights;
    group.push_back({t.name, std::move(value)});
  }
  return result;
}

}  // namespace

ModelFile load_model_file(const std::string& path) {
  Reader file(path);
  try {
    return read_model_file(file);
  } catch (const AllocationError& e) {
    // Sizes are checked against the file first, so this is a valid file too large for memory.
    fail<AllocationError>("[model_file] cannot load '", path, "': ", e.what());
  } catch (const std::bad_alloc&) {
    fail<AllocationError>("[model_file] cannot load '", path, "': out of memory");
  } catch (const std::length_error& e) {
    fail<AllocationError>("[model_file] cannot load '", path, "': ", e.what());
  }
}

}  // namespace mdtrain
