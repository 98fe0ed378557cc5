#include "mdtrain/model/model_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <random>

#include "mdtrain/core/atomic_file.h"

namespace mdtrain {
namespace {

class ModelFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mdtrain_model_file_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const auto& name : entries()) ::unlink((dir_ + "/" + name).c_str());
    ::rmdir(dir_.c_str());
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(dir_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
      }
      ::closedir(d);
    }
    return names;
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

// Tensor of the given dtype filled with random bits (NaN payloads and all) so the round trip
// is checked byte for byte, not value for value.
Tensor random_tensor(Shape shape, DType dtype, std::mt19937& rng) {
  Tensor t(std::move(shape), dtype);
  auto* p = static_cast<unsigned char*>(t.raw());
  for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

ModelFile sample_file() {
  std::mt19937 rng(42);
  ModelFile f;
  f.model = Json::parse(R"({"class_name": "Sequential", "config": {"name": "m", "layers": [
      {"class_name": "Dense", "config": {"units": 3, "activation": "relu"}}]}})");
  f.compile = Json::parse(R"({"loss": "mse", "optimizer": {"class_name": "Adam",
      "config": {"learning_rate": 0.001, "epsilon": 1e-07}}, "metrics": ["mae"]})");
  f.metadata = Json::parse(R"({"mdtrain_version": "0.1.0", "epoch": 3, "loss": NaN})");
  f.weights.push_back({"dense/kernel", random_tensor({5, 3}, DType::Float32, rng)});
  f.weights.push_back({"dense/bias", random_tensor({3}, DType::Float32, rng)});
  f.weights.push_back({"d64", random_tensor({2, 2, 2}, DType::Float64, rng)});
  f.weights.push_back({"empty", random_tensor({0, 7}, DType::Float32, rng)});
  f.weights.push_back({"scalar", random_tensor({}, DType::Float64, rng)});
  f.optimizer_state.push_back({"iterations", random_tensor({}, DType::Int64, rng)});
  f.optimizer_state.push_back({"dense/kernel/m", random_tensor({5, 3}, DType::Float32, rng)});
  f.optimizer_state.push_back({"labels", random_tensor({9}, DType::Int32, rng)});
  f.optimizer_state.push_back({"bytes", random_tensor({13}, DType::UInt8, rng)});
  f.optimizer_state.push_back({"dense/bias", random_tensor({3}, DType::Float32, rng)});  // same name, other group
  return f;
}

// A small file for the exhaustive corruption tests.
ModelFile tiny_file() {
  ModelFile f;
  f.model = Json::parse(R"({"class_name": "Dense"})");
  Tensor k({2, 2}, DType::Float32);
  for (int i = 0; i < 4; ++i) k.data<float>()[i] = 0.5f * static_cast<float>(i) - 1.0f;
  Tensor b({3}, DType::Float64);
  for (int i = 0; i < 3; ++i) b.data<double>()[i] = static_cast<double>(i) / 3.0;
  f.weights.push_back({"k", k});
  f.optimizer_state.push_back({"b", b});
  return f;
}

void expect_same(const ModelFile& a, const ModelFile& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.compile, b.compile);
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  ASSERT_EQ(a.optimizer_state.size(), b.optimizer_state.size());
  for (std::size_t i = 0; i < a.weights.size(); ++i) {
    EXPECT_EQ(a.weights[i].name, b.weights[i].name);
    EXPECT_TRUE(same_bytes(a.weights[i].value, b.weights[i].value)) << a.weights[i].name;
  }
  for (std::size_t i = 0; i < a.optimizer_state.size(); ++i) {
    EXPECT_EQ(a.optimizer_state[i].name, b.optimizer_state[i].name);
    EXPECT_TRUE(same_bytes(a.optimizer_state[i].value, b.optimizer_state[i].value)) << a.optimizer_state[i].name;
  }
}

template <class E>
std::string error_of(const std::string& path) {
  try {
    load_model_file(path);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "load_model_file('" << path << "') did not throw";
  return "";
}

std::string corrupt_error(const std::string& path) { return error_of<std::invalid_argument>(path); }

// Plain (non-durable) write: the corruption loops write thousands of files, and fsync per file
// would make them slow without testing anything more.
void put(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string le32(std::uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file with a hand-written header (and a correct header checksum) followed by `payload`.
std::string craft(const std::string& header, const std::string& payload, std::uint32_t version = 1) {
  std::string f = std::string("MDTRAIN\0", 8) + le32(version) + le32(crc32(header.data(), header.size())) +
                  le64(header.size()) + header;
  f.resize((f.size() + 63) / 64 * 64, '\0');
  return f + payload;
}

std::string tensors_header(const std::string& tensors) {
  return R"({"format":"mdtrain.model","model":{},"compile":null,"metadata":{},"tensors":[)" + tensors + "]}";
}

std::string float_payload(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// ---- CRC ------------------------------------------------------------------------------------

std::uint32_t bitwise_crc32(const unsigned char* p, std::size_t n) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

TEST(Crc32, MatchesZlibCheckValues) {
  EXPECT_EQ(crc32("", 0), 0u);
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  const char* fox = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(crc32(fox, std::strlen(fox)), 0x414FA339u);
}

TEST(Crc32, SlicedLoopAgreesWithBitwiseDefinitionAndChains) {
  std::mt19937 rng(5);
  std::vector<unsigned char> buf(1000);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (std::size_t start = 0; start < 9; ++start) {
    for (std::size_t n = 0; n + start <= 300; n += 7) {
      ASSERT_EQ(crc32(buf.data() + start, n), bitwise_crc32(buf.data() + start, n)) << start << " " << n;
    }
  }
  std::uint32_t whole = crc32(buf.data(), buf.size());
  for (std::size_t split = 0; split <= buf.size(); split += 37)
    EXPECT_EQ(crc32(buf.data() + split, buf.size() - split, crc32(buf.data(), split)), whole);
}

// ---- round trips ----------------------------------------------------------------------------

TEST_F(ModelFileTest, RoundTripIsBitwise) {
  ModelFile f = sample_file();
  save_model_file(path("m.mdtrain"), f);
  ModelFile back = load_model_file(path("m.mdtrain"));
  expect_same(f, back);
  EXPECT_TRUE(std::isnan(back.metadata.at("loss").as_number()));
  EXPECT_EQ(back.compile.at("optimizer").at("config").at("epsilon").as_number(), 1e-07);
  // Loaded tensors own fresh CPU storage.
  EXPECT_FALSE(back.weights[0].value.same_storage(f.weights[0].value));
  EXPECT_EQ(entries(), std::vector<std::string>{"m.mdtrain"});
}

TEST_F(ModelFileTest, SavingTwiceGivesIdenticalBytes) {
  ModelFile f = sample_file();
  save_model_file(path("a"), f);
  save_model_file(path("b"), load_model_file(path("a")));
  EXPECT_EQ(read_file(path("a")), read_file(path("b")));
}

TEST_F(ModelFileTest, EmptyModelRoundTrips) {
  ModelFile f;
  save_model_file(path("e"), f);
  ModelFile back = load_model_file(path("e"));
  EXPECT_TRUE(back.model.is_null());
  EXPECT_TRUE(back.compile.is_null());
  EXPECT_EQ(back.metadata, Json::object());
  EXPECT_TRUE(back.weights.empty());
  EXPECT_TRUE(back.optimizer_state.empty());
  EXPECT_EQ(read_file(path("e")).size() % 64, 0u);
}

TEST_F(ModelFileTest, LayoutFollowsTheSpec) {
  ModelFile f = tiny_file();
  save_model_file(path("t"), f);
  std::string bytes = read_file(path("t"));
  ASSERT_GE(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("MDTRAIN\0", 8));
  EXPECT_EQ(bytes.substr(8, 4), le32(1));
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[16 + i]);
  std::string header_text = bytes.substr(24, header_len);
  EXPECT_EQ(bytes.substr(12, 4), le32(crc32(header_text.data(), header_text.size())));
  Json header = Json::parse(header_text);
  EXPECT_EQ(header.at("format").as_string(), "mdtrain.model");
  const auto& tensors = header.at("tensors").as_array();
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0].at("name").as_string(), "k");
  EXPECT_EQ(tensors[0].at("group").as_string(), "weights");
  EXPECT_EQ(tensors[0].at("dtype").as_string(), "float32");
  EXPECT_EQ(tensors[0].at("shape"), Json::parse("[2,2]"));
  EXPECT_EQ(tensors[0].at("offset").as_int(), 0);
  EXPECT_EQ(tensors[0].at("nbytes").as_int(), 16);
  EXPECT_EQ(tensors[1].at("group").as_string(), "optimizer");
  EXPECT_EQ(tensors[1].at("dtype").as_string(), "float64");
  EXPECT_EQ(tensors[1].at("offset").as_int(), 64);
  EXPECT_EQ(tensors[1].at("nbytes").as_int(), 24);
  std::size_t payload_start = (24 + header_len + 63) / 64 * 64;
  EXPECT_EQ(bytes.size(), payload_start + 64 + 24);
  EXPECT_EQ(std::memcmp(bytes.data() + payload_start, f.weights[0].value.raw(), 16), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + payload_start + 64, f.optimizer_state[0].value.raw(), 24), 0);
  EXPECT_EQ(static_cast<std::uint32_t>(tensors[0].at("crc32").as_int()), crc32(f.weights[0].value.raw(), 16));
}

// ---- saving ---------------------------------------------------------------------------------

TEST_F(ModelFileTest, SaveRejectsBadInputBeforeTouchingTheOldFile) {
  save_model_file(path("m"), tiny_file());
  const std::string before = read_file(path("m"));

  ModelFile dup = tiny_file();
  dup.weights.push_back({"k", Tensor({1})});
  try {
    save_model_file(path("m"), dup);
    ADD_FAILURE() << "expected invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "[model_file] duplicate tensor name 'k' in group 'weights'");
  }
  ModelFile unnamed = tiny_file();
  unnamed.optimizer_state.push_back({"", Tensor({1})});
  EXPECT_THROW(save_model_file(path("m"), unnamed), std::invalid_argument);
  ModelFile undefined = tiny_file();
  undefined.weights.push_back({"u", Tensor()});
  EXPECT_THROW(save_model_file(path("m"), undefined), std::invalid_argument);

  EXPECT_EQ(read_file(path("m")), before);
  EXPECT_EQ(entries(), std::vector<std::string>{"m"});
}

TEST_F(ModelFileTest, SaveReplacesAtomically) {
  save_model_file(path("m"), tiny_file());
  ModelFile f = sample_file();
  save_model_file(path("m"), f);
  expect_same(load_model_file(path("m")), f);
  EXPECT_EQ(entries(), std::vector<std::string>{"m"});
}

TEST_F(ModelFileTest, SaveIntoMissingDirectoryIsAnIoError) {
  EXPECT_THROW(save_model_file(path("no/dir/m"), tiny_file()), std::runtime_error);
}

// ---- loading: I/O errors --------------------------------------------------------------------

TEST_F(ModelFileTest, MissingFileIsNotFound) {
  EXPECT_EQ(error_of<std::runtime_error>(path("nope.mdtrain")),
            "[model_file] '" + path("nope.mdtrain") + "' not found");
  EXPECT_EQ(error_of<std::runtime_error>(path("nope/x")), "[model_file] '" + path("nope/x") + "' not found");
}

TEST_F(ModelFileTest, DirectoryIsNotAModelFile) {
  std::string msg = error_of<std::runtime_error>(dir_);
  EXPECT_EQ(msg.rfind("[model_file] cannot read '" + dir_ + "'", 0), 0u) << msg;
}

// ---- loading: corruption --------------------------------------------------------------------

TEST_F(ModelFileTest, EveryTruncationIsReportedAsCorrupt) {
  save_model_file(path("t"), tiny_file());
  const std::string bytes = read_file(path("t"));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    put(path("cut"), bytes.substr(0, n));
    std::string msg = corrupt_error(path("cut"));
    ASSERT_EQ(msg.rfind("[model_file] '" + path("cut") + "' is corrupt: ", 0), 0u) << n << ": " << msg;
  }
  EXPECT_EQ(corrupt_error(path("cut")), "[model_file] '" + path("cut") + "' is corrupt: file is " +
                                            std::to_string(bytes.size() - 1) + " bytes but its header describes " +
                                            std::to_string(bytes.size()) + " (truncated?)");
}

TEST_F(ModelFileTest, EveryFlippedByteIsDetected) {
  // Checksums cover the header and the tensors, padding must be zero and the prefix is checked
  // field by field, so no single damaged byte anywhere can go unnoticed.
  save_model_file(path("t"), tiny_file());
  const std::string bytes = read_file(path("t"));
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char mask : {0x01, 0x80, 0xFF}) {
      std::string damaged = bytes;
      damaged[i] = static_cast<char>(damaged[i] ^ mask);
      put(path("flip"), damaged);
      std::string msg = corrupt_error(path("flip"));
      ASSERT_FALSE(msg.empty()) << "byte " << i << " mask " << int(mask);
    }
  }
}

TEST_F(ModelFileTest, TrailingBytesAreCorrupt) {
  save_model_file(path("t"), tiny_file());
  write_file_atomically(path("t2"), read_file(path("t")) + std::string(3, '\0'));
  EXPECT_NE(corrupt_error(path("t2")).find("3 unexpected bytes after the last tensor"), std::string::npos);
}

TEST_F(ModelFileTest, PayloadDamageNamesTheTensor) {
  save_model_file(path("t"), tiny_file());
  std::string bytes = read_file(path("t"));
  bytes[bytes.size() - 1] ^= 0x10;  // last byte of "b"
  write_file_atomically(path("t"), bytes);
  EXPECT_EQ(corrupt_error(path("t")), "[model_file] '" + path("t") + "' is corrupt: checksum mismatch in tensor 'b'");
}

TEST_F(ModelFileTest, BadMagicVersionAndHeaderLength) {
  save_model_file(path("t"), tiny_file());
  const std::string good = read_file(path("t"));
  const std::string prefix = "[model_file] '" + path("x") + "' ";

  std::string bad = good;
  bad.replace(0, 8, "PK\x03\x04zip!");
  write_file_atomically(path("x"), bad);
  EXPECT_EQ(corrupt_error(path("x")), prefix + "is corrupt: bad magic bytes (not an mdtrain model file)");

  bad = good;
  bad.replace(8, 4, le32(2));
  write_file_atomically(path("x"), bad);
  EXPECT_EQ(corrupt_error(path("x")),
            prefix + "has format version 2; this mdtrain reads versions up to 1 (upgrade mdtrain to read it)");

  bad = good;
  bad.replace(16, 8, le64(~std::uint64_t{0}));
  write_file_atomically(path("x"), bad);
  EXPECT_EQ(corrupt_error(path("x")), prefix + "is corrupt: header length 18446744073709551615 exceeds the " +
                                          std::to_string(good.size()) + "-byte file");

  bad = good;
  bad[12] ^= 1;
  write_file_atomically(path("x"), bad);
  EXPECT_EQ(corrupt_error(path("x")), prefix + "is corrupt: header checksum mismatch");

  write_file_atomically(path("x"), "");
  EXPECT_EQ(corrupt_error(path("x")), prefix + "is corrupt: file is 0 bytes, shorter than the 24-byte prefix");
}

// Crafted headers with valid checksums: the structural checks must catch what CRCs cannot.
TEST_F(ModelFileTest, InconsistentHeadersAreCorrupt) {
  const std::string four = float_payload({1, 2, 3, 4});
  const std::uint32_t c4 = crc32(four.data(), four.size());
  auto entry = [&](const std::string& fields) {
    return R"({"name":"w","group":"weights","dtype":"float32","shape":[4],"offset":0,"nbytes":16,"crc32":)" +
           std::to_string(c4) + fields + "}";
  };
  // Sanity: the well-formed crafted file loads.
  write_file_atomically(path("c"), craft(tensors_header(entry("")), four));
  EXPECT_EQ(load_model_file(path("c")).weights.at(0).value.data<float>()[3], 4.0f);

  struct Case {
    std::string header;
    std::string payload;
    std::string expected;  // part of the message
  };
  std::string big = "18014398509481984";  // 2^54: not exactly an integer we accept
  std::vector<Case> cases = {
      {"[1,2]", four, "header is not a JSON object"},
      {"{\"format\":", four, "header is not valid JSON: [json]"},
      {R"({"format":"other","model":{},"tensors":[]})", "", "header 'format' is \"other\""},
      {R"({"format":"mdtrain.model","tensors":[]})", "", "header has no 'model'"},
      {R"({"format":"mdtrain.model","model":{}})", "", "header has no 'tensors' array"},
      {tensors_header("3"), "", "tensor entry #0 is not an object"},
      {tensors_header(R"({"group":"weights"})"), "", "tensor entry #0 has no 'name'"},
      {tensors_header(entry(R"(,"dtype":"bfloat16")")), four, "tensor 'w' has unknown dtype \"bfloat16\""},
      {tensors_header(entry(R"(,"group":"grads")")), four, "tensor 'w' has unknown group \"grads\""},
      {tensors_header(entry(R"(,"shape":[5])")), four, "shape (5,) of float32 does not match 16 bytes"},
      {tensors_header(entry(R"(,"shape":[2,2,2])")), four, "does not match 16 bytes"},
      {tensors_header(entry(R"(,"shape":[-4])")), four, "each shape dimension must be a non-negative integer"},
      {tensors_header(entry(R"(,"shape":[4.5])")), four, "must be a non-negative integer, got 4.5"},
      {tensors_header(entry(R"(,"shape":"4")")), four, "'shape' must be an array"},
      {tensors_header(entry(R"(,"shape":[4294967296,4294967296,4294967296])")), four, "does not match 16 bytes"},
      {tensors_header(entry(",\"shape\":[" + big + "]")), four, "must be a non-negative integer"},
      {tensors_header(entry(R"(,"nbytes":17)")), four, "does not match 17 bytes"},
      {tensors_header(entry(R"(,"offset":64)")), four, "(truncated?)"},
      {tensors_header(entry(R"(,"offset":8)")), four, "offset 8 is not a multiple of 64"},
      {tensors_header(entry(R"(,"offset":NaN)")), four, "'offset' must be a non-negative integer"},
      {tensors_header(entry(R"(,"offset":-64)")), four, "'offset' must be a non-negative integer"},
      {tensors_header(entry(R"(,"crc32":4294967296)")), four, "does not fit 32 bits"},
      {tensors_header(entry(R"(,"crc32":1)")), four, "checksum mismatch in tensor 'w'"},
      {tensors_header(entry("") + "," + entry("")), four, "duplicate tensor name 'w'"},
      {tensors_header(entry("") + "," + entry(R"(,"name":"v")")), four, "tensor 'v' at offset 0 overlaps"},
      {tensors_header(entry("")), four + "junk", "4 unexpected bytes after the last tensor"},
      {tensors_header(entry("")), four.substr(0, 15), "(truncated?)"},
      {tensors_header("") + "  ", "", ""},  // trailing whitespace in the header is fine JSON
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.header);
    put(path("c"), craft(c.header, c.payload));
    if (c.expected.empty()) {
      EXPECT_NO_THROW(load_model_file(path("c")));
      continue;
    }
    std::string msg = corrupt_error(path("c"));
    EXPECT_EQ(msg.rfind("[model_file] '" + path("c") + "' is corrupt: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
  }

  // Non-zero padding between the header and the payload.
  std::string padded = craft(tensors_header(entry("")), four);
  std::size_t header_end = 24 + tensors_header(entry("")).size();
  ASSERT_LT(header_end, padded.size() - 16);
  padded[header_end] = ' ';
  write_file_atomically(path("c"), padded);
  EXPECT_NE(corrupt_error(path("c")).find("non-zero padding byte at offset " + std::to_string(header_end)),
            std::string::npos);

  // Version 0 never existed.
  write_file_atomically(path("c"), craft(tensors_header(entry("")), four, 0));
  EXPECT_NE(corrupt_error(path("c")).find("format version 0"), std::string::npos);
}

TEST_F(ModelFileTest, HugeShapeIsRejectedWithoutAllocating) {
  // Claims 2^40 float64 elements in a tiny file: must fail on the size checks, not on malloc.
  std::string h = tensors_header(
      R"({"name":"w","group":"weights","dtype":"float64","shape":[1099511627776],"offset":0,"nbytes":8796093022208,"crc32":0})");
  write_file_atomically(path("h"), craft(h, "12345678"));
  EXPECT_NE(corrupt_error(path("h")).find("(truncated?)"), std::string::npos);
}

TEST_F(ModelFileTest, RandomDamageNeverCrashes) {
  save_model_file(path("t"), tiny_file());
  const std::string good = read_file(path("t"));
  std::mt19937 rng(11);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string bad = good;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 3) {
        case 0: bad[rng() % bad.size()] = static_cast<char>(rng()); break;
        case 1: bad.erase(rng() % bad.size(), 1 + rng() % 8); break;
        default: bad.insert(rng() % bad.size(), 1 + rng() % 8, static_cast<char>(rng())); break;
      }
      if (bad.empty()) bad = "x";
    }
    if (bad == good) continue;
    put(path("r"), bad);
    ASSERT_FALSE(corrupt_error(path("r")).empty()) << iter;
  }
}

// ---- hostile files: no hang, no allocation beyond the file --------------------------------------

TEST_F(ModelFileTest, FifoIsRefusedWithoutBlocking) {
  const std::string p = path("pipe.mdtrain");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  auto result = std::async(std::launch::async, [p] { return error_of<std::runtime_error>(p); });
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "load_model_file blocked on a FIFO for 20 s";
    int fd = ::open(p.c_str(), O_WRONLY | O_NONBLOCK);  // releases the blocked open()
    if (fd >= 0) ::close(fd);
  }
  EXPECT_EQ(result.get(), "[model_file] cannot read '" + p + "': it is a named pipe (FIFO), not a regular file");
  EXPECT_EQ(error_of<std::runtime_error>("/dev/zero"),
            "[model_file] cannot read '/dev/zero': it is a character device, not a regular file");
}

// Peak resident memory grown while running `f`, in bytes; -1 when the peak cannot be reset here
// (writing 5 to /proc/self/clear_refs resets VmHWM, Linux 4.0+).
long long peak_growth(const std::function<void()>& f) {
  auto field = [](const char* key) -> long long {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + std::strlen(key)) * 1024;
    return -1;
  };
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    if (!clear.good()) return -1;
  }
  long long before = field("VmRSS:");
  if (before < 0 || field("VmHWM:") > before + (16 << 20)) return -1;
  f();
  return field("VmHWM:") - before;
}

TEST_F(ModelFileTest, SparseFileIsRejectedWithoutReadingItIntoMemory) {
  // 256 MiB of holes (sparse: no disk space) behind headers that claim all of it; the checksums
  // must fail while reading through a small buffer, before anything that size is allocated.
  constexpr std::uint64_t kSize = 256ull << 20;
  auto sparse = [&](const std::string& name, const std::string& head) {
    put(path(name), head);
    ASSERT_EQ(::truncate(path(name).c_str(), static_cast<off_t>(kSize)), 0);
  };
  // (a) a header length that covers the whole file: past the 64 MiB a header may have, refused
  // before it is checksummed or read
  sparse("header", std::string("MDTRAIN\0", 8) + le32(1) + le32(0x12345678) + le64(kSize - 24));
  // (b) a valid header describing one tensor as large as the rest of the file
  std::string head = craft(tensors_header(""), "");
  std::uint64_t payload_start = 0;
  std::string tensor_header;
  for (int pass = 0; pass < 2; ++pass) {  // the header's own length moves where the payload starts
    std::uint64_t nbytes = kSize - payload_start;
    tensor_header =
        tensors_header(R"({"name":"w","group":"weights","dtype":"uint8","shape":[)" + std::to_string(nbytes) +
                       R"(],"offset":0,"nbytes":)" + std::to_string(nbytes) + R"(,"crc32":7})");
    payload_start = craft(tensor_header, "").size();
  }
  sparse("tensor", craft(tensor_header, ""));

  std::string header_error, tensor_error;
  long long growth = peak_growth([&] {
    header_error = corrupt_error(path("header"));
    tensor_error = corrupt_error(path("tensor"));
  });
  EXPECT_EQ(header_error, "[model_file] '" + path("header") + "' is corrupt: header length " +
                              std::to_string(kSize - 24) + " exceeds the 64 MiB a header may have");
  EXPECT_EQ(tensor_error, "[model_file] '" + path("tensor") + "' is corrupt: checksum mismatch in tensor 'w'");
  if (growth >= 0) EXPECT_LT(growth, 64ll << 20) << "peak memory grew by " << (growth >> 20) << " MiB";
}

TEST_F(ModelFileTest, HeaderSizesAreCheckedAgainstTheFileWithTheFieldNamed) {
  // Offsets and sizes near 2^53 and 2^64 must not wrap around the file-size checks.
  const std::string huge = "9007199254740992";  // 2^53, the largest count the reader accepts
  struct Case {
    std::string entry, expect;
  };
  std::vector<Case> cases = {
      {R"({"name":"w","group":"weights","dtype":"uint8","shape":[4],"offset":)" + huge + R"(,"nbytes":4,"crc32":0})",
       "(truncated?)"},
      {R"({"name":"w","group":"weights","dtype":"uint8","shape":[)" + huge + R"(],"offset":0,"nbytes":)" + huge +
           R"(,"crc32":0})",
       "(truncated?)"},
      {R"({"name":"w","group":"weights","dtype":"float64","shape":[4294967296,4294967296],"offset":0,"nbytes":0,"crc32":0})",
       "tensor 'w': shape (4294967296, 4294967296) of float64 does not match 0 bytes"},
      {R"({"name":"w","group":"weights","dtype":"uint8","shape":[4],"offset":18446744073709551616,"nbytes":4,"crc32":0})",
       "tensor 'w': 'offset' must be a non-negative integer, got 1.8446744073709552e+19"},  // 2^64 as a double
      {R"({"name":"w","group":"weights","dtype":"uint8","shape":[-4],"offset":0,"nbytes":4,"crc32":0})",
       "tensor 'w': each shape dimension must be a non-negative integer, got -4"},
  };
  for (const auto& c : cases) {
    write_file_atomically(path("c"), craft(tensors_header(c.entry), "1234"));
    std::string msg = corrupt_error(path("c"));
    EXPECT_EQ(msg.rfind("[model_file] '" + path("c") + "' is corrupt: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace mdtrain
