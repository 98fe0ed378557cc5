// layer_from_config is the one way layers are made (model files and Python): every class is in
// its table, and each class's from_config reads back what its config() writes.
#include <gtest/gtest.h>

#include <map>

#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/layer_factory.h"

namespace mdtrain {
namespace {

// A config per registered class, with non-default values where the class has any.
Json spec_for(const std::string& cls) {
  const std::map<std::string, const char*> configs = {
      {"Dense", R"({"units": 3, "activation": "tanh", "use_bias": false, "kernel_regularizer": "l2"})"},
      {"Activation", R"({"activation": "relu"})"},
      {"Flatten", "{}"},
      {"Dropout", R"({"rate": 0.25, "seed": 9})"},
      {"Conv2D", R"({"filters": 2, "kernel_size": [3, 1], "strides": 2, "padding": "same", "dilation_rate": 1})"},
      {"MaxPooling2D", R"({"pool_size": 3, "strides": [1, 2], "padding": "same"})"},
      {"AveragePooling2D", R"({"pool_size": [2, 1]})"},
      {"GlobalAveragePooling2D", R"({"keepdims": true})"},
      {"Reshape", R"({"target_shape": [2, -1]})"},
      {"BatchNormalization", R"({"momentum": 0.5, "epsilon": 0.01, "center": false, "synchronized": true})"},
      {"LayerNormalization", R"({"axis": [-1], "epsilon": 1e-5, "scale": false})"},
      {"Embedding", R"({"input_dim": 7, "output_dim": 3, "mask_zero": true})"},
      {"Add", "{}"},
      {"Multiply", "{}"},
      {"Concatenate", R"({"axis": 1})"},
      {"SimpleRNN", R"({"units": 2, "activation": "relu", "return_sequences": true})"},
      {"GRU", R"({"units": 3, "go_backwards": true, "use_bias": false})"},
      {"Bidirectional",
       R"({"layer": {"class_name": "GRU", "config": {"name": "g", "units": 2}}, "merge_mode": "concat"})"},
      {"LSTM", R"({"units": 3, "return_sequences": true, "go_backwards": true, "unit_forget_bias": false})"},
      {"Masking", R"({"mask_value": -1.0})"},
      {"Conv1D", R"({"filters": 2, "kernel_size": 3, "strides": 2, "padding": "causal", "activation": "relu"})"},
      {"MaxPooling1D", R"({"pool_size": 3, "strides": 1, "padding": "same"})"},
      {"AveragePooling1D", R"({"pool_size": [4]})"},
      {"GlobalAveragePooling1D", R"({"keepdims": true})"},
      {"GlobalMaxPooling1D", R"({"keepdims": true})"},
      {"GlobalMaxPooling2D", R"({"keepdims": true})"},
      {"Permute", R"({"dims": [2, 1]})"},
      {"RepeatVector", R"({"n": 4})"},
      {"Identity", "{}"},
      {"ZeroPadding1D", R"({"padding": [2, 0]})"},
      {"ZeroPadding2D", R"({"padding": [[0, 1], [2, 3]]})"},
      {"Cropping1D", R"({"cropping": [0, 2]})"},
      {"Cropping2D", R"({"cropping": [[1, 0], [0, 2]]})"},
      {"UpSampling1D", R"({"size": 3})"},
      {"UpSampling2D", R"({"size": [3, 1]})"},
      {"Conv2DTranspose", R"({"filters": 2, "kernel_size": [3, 2], "strides": 2, "padding": "same",
                              "output_padding": [1, 0]})"},
      {"Conv1DTranspose", R"({"filters": 3, "kernel_size": 4, "strides": 3, "output_padding": 2})"},
      {"DepthwiseConv2D", R"({"kernel_size": 3, "depth_multiplier": 2, "padding": "same", "use_bias": false})"},
      {"SeparableConv2D", R"({"filters": 4, "kernel_size": [1, 3], "depth_multiplier": 3, "dilation_rate": 2})"},
      {"ReLU", R"({"max_value": 6.0, "negative_slope": 0.1, "threshold": 0.5})"},
      {"LeakyReLU", R"({"negative_slope": 0.05})"},
      {"ELU", R"({"alpha": 0.5})"},
      {"PReLU", R"({"shared_axes": [1], "alpha_regularizer": null})"},
      {"Softmax", R"({"axis": [1, 2]})"},
      {"UnitNormalization", R"({"axis": 1})"},
      {"Subtract", "{}"},
      {"Average", "{}"},
      {"Maximum", "{}"},
      {"Minimum", "{}"},
      {"Dot", R"({"axes": [1, -1], "normalize": true})"},
      {"GaussianNoise", R"({"stddev": 0.2, "seed": 4})"},
      {"GaussianDropout", R"({"rate": 0.3, "seed": 5})"},
      {"SpatialDropout1D", R"({"rate": 0.4, "seed": 6})"},
      {"SpatialDropout2D", R"({"rate": 0.5, "seed": 7, "data_format": "channels_last"})"},
      {"ActivityRegularization", R"({"l1": 0.01, "l2": 0.02})"},
  };
  Json config = Json::parse(configs.at(cls));
  config.set("name", "layer_" + cls);
  Json spec = Json::object();
  spec.set("class_name", cls);
  spec.set("config", config);
  return spec;
}

TEST(LayerRegistry, EveryClassRoundTripsItsConfig) {
  const auto names = layer_class_names();
  EXPECT_EQ(names.size(), 55u);
  for (const auto& cls : names) {
    SCOPED_TRACE(cls);
    const Json spec = spec_for(cls);
    auto layer = layer_from_config(spec);
    EXPECT_EQ(layer->class_name(), cls);
    EXPECT_EQ(layer->name(), "layer_" + cls);
    Json written = layer_to_config(*layer);
    auto again = layer_from_config(written);
    EXPECT_EQ(layer_to_config(*again), written);
    // The fields given were taken, not defaulted.
    for (const auto& [key, value] : spec.at("config").as_object()) {
      if (key == "axis" || key == "strides" || key == "pool_size" || key == "dilation_rate" ||
          key == "kernel_regularizer" || key == "layer" || key == "kernel_size" || key == "output_padding")
        continue;  // written in Keras's canonical form (pairs, objects), not as given
      EXPECT_EQ(written.at("config").at(key), value) << key;
    }
  }
}

TEST(LayerRegistry, MissingFieldsTakeKerasDefaultsAndUnknownOnesAreIgnored) {
  auto bn = layer_from_config(
      Json::parse(R"({"class_name": "BatchNormalization", "config": {"name": "bn", "not_a_field": [1, 2]}})"));
  Json c = bn->config();
  EXPECT_DOUBLE_EQ(c.at("momentum").as_number(), 0.99);
  EXPECT_DOUBLE_EQ(c.at("epsilon").as_number(), 1e-3);
  EXPECT_FALSE(c.contains("not_a_field"));
  auto pool =
      layer_from_config(Json::parse(R"({"class_name": "MaxPooling2D", "config": {"name": "p", "strides": null}})"));
  EXPECT_EQ(pool->config().at("strides").dump(), "[2,2]");
}

TEST(LayerRegistry, UnknownClassListsTheKnownOnes) {
  try {
    layer_from_config(Json::parse(R"({"class_name": "Conv3D", "config": {"name": "c"}})"));
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "[layers] unknown layer class 'Conv3D'; known: Dense, Activation, Flatten, Dropout, Conv2D, "
                 "MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, Reshape, BatchNormalization, "
                 "LayerNormalization, Embedding, Add, Multiply, Concatenate, SimpleRNN, LSTM, GRU, Bidirectional, "
                 "Masking, Conv1D, MaxPooling1D, AveragePooling1D, GlobalAveragePooling1D, "
                 "GlobalMaxPooling1D, GlobalMaxPooling2D, Permute, RepeatVector, Identity, ZeroPadding1D, "
                 "ZeroPadding2D, Cropping1D, Cropping2D, UpSampling1D, UpSampling2D, Conv2DTranspose, "
                 "Conv1DTranspose, DepthwiseConv2D, SeparableConv2D, ReLU, LeakyReLU, ELU, PReLU, Softmax, "
                 "UnitNormalization, Subtract, Average, Maximum, Minimum, Dot, GaussianNoise, GaussianDropout, "
                 "SpatialDropout1D, SpatialDropout2D, ActivityRegularization");
  }
}

TEST(LayerRegistry, DropoutSeedMustBeANonNegativeIntegerBelow2To53) {
  auto seeded = [](const char* seed) {
    return Json::parse(std::string(R"({"class_name": "Dropout", "config": {"name": "d", "rate": 0.5, "seed": )") +
                       seed + "}}");
  };
  EXPECT_EQ(layer_from_config(seeded("9007199254740991"))->config().at("seed").as_int(), 9007199254740991);
  for (const char* bad : {"-1", "0.5", "1e30", "9007199254740993"}) {
    SCOPED_TRACE(bad);
    try {
      layer_from_config(seeded(bad));
      ADD_FAILURE() << "expected std::invalid_argument";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[dropout] layer \"d\": seed must be", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace mdtrain
