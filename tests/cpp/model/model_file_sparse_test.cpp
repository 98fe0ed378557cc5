// A sparse model file is checked without reading its holes: crc32_of_zeros accounts them, so a
// header declaring a 64 GiB tensor over a `truncate`d file fails its checksum in milliseconds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mdtrain/model/model_file.h"

namespace mdtrain {
namespace {

TEST(Crc32OfZeros, EqualsTheChecksumOfThatManyZeroBytes) {
  for (std::uint64_t n : {0u, 1u, 7u, 8u, 63u, 64u, 1000u, 65537u}) {
    std::vector<char> zeros(n, 0);
    EXPECT_EQ(crc32_of_zeros(n), crc32(zeros.data(), zeros.size())) << n;
    // Continuing a running checksum, as a hole after data does.
    const char data[] = "mdtrain";
    const std::uint32_t head = crc32(data, 7);
    std::vector<char> both(data, data + 7);
    both.insert(both.end(), zeros.begin(), zeros.end());
    EXPECT_EQ(crc32_of_zeros(n, head), crc32(both.data(), both.size())) << n;
  }
}

TEST(SparseModelFile, AHugeDeclaredTensorOverAHoleFailsItsChecksumWithoutReadingTheHole) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("mdtrain_sparse_" + std::to_string(::getpid()) + ".mdtrain")).string();
  // A real file with one 64-byte tensor, then the tensor's entry rewritten to 64 GiB.
  ModelFile f;
  f.model = Json::object();
  Tensor t({16}, DType::Float32);
  t.fill(0.0);
  f.weights.push_back({"w", t});
  save_model_file(path, f);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data() + 16, 8);
  Json header = Json::parse(bytes.substr(24, header_len));
  const std::uint64_t huge = std::uint64_t{64} << 30;
  Json entry = header.at("tensors").as_array()[0];
  Json shape = Json::array();
  shape.push_back(Json(static_cast<std::uint64_t>(huge / 4)));
  entry.set("shape", shape);
  entry.set("nbytes", Json(huge));
  entry.set("crc32", Json(static_cast<std::uint64_t>(12345)));  // not the zeros' checksum
  Json tensors = Json::array();
  tensors.push_back(entry);
  header.set("tensors", tensors);
  const std::string text = header.dump();
  std::string prefix = bytes.substr(0, 24);
  const std::uint32_t crc = crc32(text.data(), text.size());
  const std::uint64_t len = text.size();
  std::memcpy(&prefix[12], &crc, 4);
  std::memcpy(&prefix[16], &len, 8);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << prefix << text;
  }
  const std::uint64_t payload_start = (24 + len + 63) / 64 * 64;
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(payload_start + huge)), 0);
  try {
    load_model_file(path);
    FAIL() << "loaded";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'" + path + "' is corrupt: checksum mismatch in tensor 'w'"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mdtrain
