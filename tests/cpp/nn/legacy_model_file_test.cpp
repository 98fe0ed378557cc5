// A model file written before nlohmann/json replaced the hand-written JSON code
// (tests/py/data/legacy_model.mdt, see make_legacy_model.py there) still reads: its header parses,
// writes back to the same values (numbers bit for bit; their spelling is now nlohmann's, e.g.
// 0.0001 where the old writer chose 1e-04, as Python's json does), and every layer in it is
// rebuilt by layer_from_config with the config it was saved with. (tests/py/test_layer_config_path.py loads the whole
// model.)
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "mdtrain/nn/layer_factory.h"

namespace mdtrain {
namespace {

std::string legacy_header() {
  std::ifstream in(std::string(MDTRAIN_SOURCE_DIR) + "/tests/py/data/legacy_model.mdt", std::ios::binary);
  EXPECT_TRUE(in.good());
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 24) return "";
  std::uint64_t length = 0;
  std::memcpy(&length, bytes.data() + 16, sizeof(length));  // little-endian, as this machine
  return bytes.substr(24, length);
}

TEST(LegacyModelFile, HeaderParsesAndWritesBackTheSameValues) {
  const std::string header = legacy_header();
  ASSERT_FALSE(header.empty());
  Json j = Json::parse(header);
  EXPECT_EQ(j.at("format").as_string(), "mdtrain.model");
  const std::string written = j.dump();
  EXPECT_EQ(Json::parse(written), j);
  EXPECT_EQ(Json::parse(written).dump(), written);
  // The one number whose spelling changed: the L2 factor of the Conv2D kernel regularizer.
  const Json& l1l2 = j.at("model").at("config").at("layers").as_array()[0].at("config").at("kernel_regularizer");
  EXPECT_EQ(l1l2.at("config").at("l2").as_number(), 1e-4);
  EXPECT_NE(header.find("\"l2\":1e-04"), std::string::npos);
  EXPECT_NE(written.find("\"l2\":0.0001"), std::string::npos);
}

TEST(LegacyModelFile, EveryLayerIsRebuiltWithItsSavedConfig) {
  Json j = Json::parse(legacy_header());
  const auto& layers = j.at("model").at("config").at("layers").as_array();
  ASSERT_EQ(layers.size(), 11u);
  for (const Json& spec : layers) {
    SCOPED_TRACE(spec.at("class_name").as_string());
    auto layer = layer_from_config(spec);
    EXPECT_EQ(layer_to_config(*layer).dump(), spec.dump());
  }
}

}  // namespace
}  // namespace mdtrain
