// The reshaping layers (Permute, RepeatVector, Identity, ZeroPadding1D/2D, Cropping1D/2D,
// UpSampling1D/2D), each made from its Keras config as a model file makes it: forward values
// against plain index loops written here, gradients against float64 central differences, output
// shapes, config round trips, clones, and the bad arguments with their messages.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/sequence_mask.h"
#include "gradient_check.h"

namespace mdtrain {
namespace {

using namespace testing;

std::unique_ptr<Layer> make(const std::string& spec) { return layer_from_config(Json::parse(spec)); }

std::string invalid_argument_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<wrong exception type> ") + e.what();
  }
  return "<no exception>";
}

#define EXPECT_CONTAINS(s, part) \
  EXPECT_NE((s).find(part), std::string::npos) << "message: " << (s) << "\nexpected: " << (part)

// x's element at index `at` of x's shape, or 0 when `at` is empty (padding).
using Source = std::function<std::vector<std::int64_t>(const std::vector<std::int64_t>& y_index)>;

// Every element of y (batch included) equals x at source(index), by a plain loop over y.
void expect_values(const Tensor& x, const Tensor& y, const Source& source) {
  std::vector<std::int64_t> idx(y.shape().size(), 0);
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    std::int64_t rest = i;
    for (std::size_t d = idx.size(); d-- > 0;) {
      idx[d] = rest % y.shape()[d];
      rest /= y.shape()[d];
    }
    const auto at = source(idx);
    double want = 0;
    if (!at.empty()) {
      std::int64_t off = 0;
      for (std::size_t d = 0; d < at.size(); ++d) off = off * x.shape()[d] + at[d];
      want = x.data<double>()[off];
    }
    ASSERT_EQ(y.data<double>()[i], want) << "element " << i;
  }
}

struct Case {
  const char* spec;  // the Keras config
  Shape input;       // batch excluded
  Shape output;      // Keras's output shape
  Source source;
};

std::vector<Case> cases() {
  return {
      {R"({"class_name": "Permute", "config": {"name": "p", "dims": [3, 1, 2]}})",
       {2, 3, 4},
       {4, 2, 3},
       [](const auto& i) {
         return std::vector<std::int64_t>{i[0], i[2], i[3], i[1]};
       }},
      {R"({"class_name": "Permute", "config": {"name": "p1", "dims": [1]}})",
       {5},
       {5},
       [](const auto& i) { return i; }},
      {R"({"class_name": "RepeatVector", "config": {"name": "r", "n": 3}})",
       {4},
       {3, 4},
       [](const auto& i) {
         return std::vector<std::int64_t>{i[0], i[2]};
       }},
      {R"({"class_name": "Identity", "config": {"name": "id"}})", {3, 2}, {3, 2}, [](const auto& i) { return i; }},
      {R"({"class_name": "ZeroPadding1D", "config": {"name": "z1", "padding": [1, 2]}})",
       {3, 2},
       {6, 2},
       [](const auto& i) {
         return i[1] >= 1 && i[1] < 4 ? std::vector<std::int64_t>{i[0], i[1] - 1, i[2]} : std::vector<std::int64_t>{};
       }},
      {R"({"class_name": "ZeroPadding2D", "config": {"name": "z2", "padding": [[2, 0], [1, 3]]}})",
       {2, 3, 2},
       {4, 7, 2},
       [](const auto& i) {
         return i[1] >= 2 && i[2] >= 1 && i[2] < 4 ? std::vector<std::int64_t>{i[0], i[1] - 2, i[2] - 1, i[3]}
                                                   : std::vector<std::int64_t>{};
       }},
      {R"({"class_name": "Cropping1D", "config": {"name": "c1", "cropping": [2, 1]}})",
       {6, 2},
       {3, 2},
       [](const auto& i) {
         return std::vector<std::int64_t>{i[0], i[1] + 2, i[2]};
       }},
      {R"({"class_name": "Cropping2D", "config": {"name": "c2", "cropping": [[1, 0], [0, 2]]}})",
       {4, 5, 3},
       {3, 3, 3},
       [](const auto& i) {
         return std::vector<std::int64_t>{i[0], i[1] + 1, i[2], i[3]};
       }},
      {R"({"class_name": "UpSampling1D", "config": {"name": "u1", "size": 3}})",
       {2, 2},
       {6, 2},
       [](const auto& i) {
         return std::vector<std::int64_t>{i[0], i[1] / 3, i[2]};
       }},
      {R"({"class_name": "UpSampling2D", "config": {"name": "u2", "size": [2, 3]}})",
       {2, 3, 2},
       {4, 9, 2},
       [](const auto& i) {
         return std::vector<std::int64_t>{i[0], i[1] / 2, i[2] / 3, i[3]};
       }},
  };
}

TEST(ReshapingLayers, ValuesShapesAndGradientsMatchPlainLoops) {
  std::mt19937_64 rng(5);
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.spec);
    auto layer = make(c.spec);
    EXPECT_EQ(layer->compute_output_shape(c.input), c.output);
    layer->build(c.input, 0, DType::Float64);
    EXPECT_TRUE(layer->has_cuda_kernels());
    Shape x_shape{3};
    x_shape.insert(x_shape.end(), c.input.begin(), c.input.end());
    const Tensor x = random_tensor(x_shape, rng);
    const Tensor y = layer->forward(x, ForwardContext{}).clone();
    expect_values(x, y, c.source);
    check_layer_gradients(*layer, x.clone(), ForwardContext{}, 17);
    // A second, smaller batch reuses the layer with other plans.
    x_shape[0] = 1;
    const Tensor x1 = random_tensor(x_shape, rng);
    expect_values(x1, layer->forward(x1, ForwardContext{}), c.source);
  }
}

TEST(ReshapingLayers, ConfigsRoundTripAndClonesComputeTheSame) {
  std::mt19937_64 rng(6);
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.spec);
    auto layer = make(c.spec);
    const Json spec = layer_to_config(*layer);
    EXPECT_EQ(layer_to_config(*make(spec.dump())).dump(), spec.dump());
    layer->build(c.input, 0, DType::Float64);
    auto copy = layer->clone();
    Shape x_shape{2};
    x_shape.insert(x_shape.end(), c.input.begin(), c.input.end());
    const Tensor x = random_tensor(x_shape, rng);
    const Tensor a = layer->forward(x, ForwardContext{}).clone();
    const Tensor b = copy->forward(x, ForwardContext{});
    EXPECT_EQ(dot(a, a), dot(a, b));
  }
}

TEST(ReshapingLayers, BilinearUpSampling2DGradientsAndConfig) {
  // Values: tests/cpp/ops/resize_bilinear_test.cpp; here the layer's plumbing.
  std::mt19937_64 rng(8);
  const std::string spec =
      R"({"class_name": "UpSampling2D", "config": {"name": "u", "size": [3, 2], "interpolation": "bilinear"}})";
  auto layer = make(spec);
  EXPECT_EQ(layer_to_config(*make(layer_to_config(*layer).dump())).dump(), layer_to_config(*layer).dump());
  EXPECT_EQ(layer->config().at("interpolation").as_string(), "bilinear");
  layer->build({2, 3, 2}, 0, DType::Float64);
  EXPECT_EQ(layer->output_shape(), (Shape{6, 6, 2}));
  EXPECT_TRUE(layer->has_cuda_kernels());
  check_layer_gradients(*layer, random_tensor({2, 2, 3, 2}, rng), ForwardContext{}, 19);
  // Not the nearest repeat: a pixel between two different ones is blended.
  Tensor x = Tensor::zeros({1, 2, 3, 2}, DType::Float64);
  x.data<double>()[0] = 1.0;  // (0, 0, 0, channel 0)
  const Tensor y = layer->forward(x, ForwardContext{});
  EXPECT_EQ(y.data<double>()[0], 1.0);          // an edge output reads pixel (0, 0) alone
  EXPECT_GT(y.data<double>()[2 * 2 * 6], 0.0);  // output row 2: between rows 0 and 1
  EXPECT_LT(y.data<double>()[2 * 2 * 6], 1.0);
}

TEST(ReshapingLayers, KerasConfigFormsAndDefaults) {
  // Keras's config values as its get_config writes them, and the defaults of a bare config.
  EXPECT_EQ(layer_to_config(*make(R"({"class_name": "ZeroPadding2D", "config": {"name": "z"}})")).dump(),
            Json::parse(R"({"class_name": "ZeroPadding2D", "config": {"name": "z", "trainable": true,
                "dtype": "float32", "padding": [[1, 1], [1, 1]], "data_format": "channels_last"}})")
                .dump());
  auto z = make(R"({"class_name": "ZeroPadding2D", "config": {"name": "z", "padding": [2, 3]}})");
  EXPECT_EQ(z->compute_output_shape({1, 1, 1}), (Shape{5, 7, 1}));
  auto z1 = make(R"({"class_name": "ZeroPadding1D", "config": {"name": "z", "padding": 2}})");
  EXPECT_EQ(z1->compute_output_shape({1, 1}), (Shape{5, 1}));
  auto c1 = make(R"({"class_name": "Cropping1D", "config": {"name": "c"}})");
  EXPECT_EQ(c1->compute_output_shape({4, 2}), (Shape{2, 2}));
  EXPECT_EQ(c1->config().get("data_format", Json()).is_null(), true);  // Keras's Cropping1D has none
  auto c2 = make(R"({"class_name": "Cropping2D", "config": {"name": "c", "cropping": 1}})");
  EXPECT_EQ(c2->compute_output_shape({4, 5, 2}), (Shape{2, 3, 2}));
  auto u1 = make(R"({"class_name": "UpSampling1D", "config": {"name": "u"}})");
  EXPECT_EQ(u1->config().at("size").dump(), "2");
  auto u2 = make(R"({"class_name": "UpSampling2D", "config": {"name": "u", "size": 3}})");
  EXPECT_EQ(u2->compute_output_shape({1, 2, 1}), (Shape{3, 6, 1}));
  EXPECT_EQ(u2->config().at("interpolation").as_string(), "nearest");
}

TEST(ReshapingLayers, OnlyIdentityPassesTheMaskOn) {
  // Keras 3: Identity supports_masking; the other reshaping layers drop the mask.
  EXPECT_TRUE(passes_mask(*make(R"({"class_name": "Identity", "config": {"name": "i"}})")));
  for (const auto& c : cases())
    if (std::string(c.spec).find("Identity") == std::string::npos) EXPECT_FALSE(passes_mask(*make(c.spec))) << c.spec;
}

TEST(ReshapingLayers, RefuseBadArgumentsAndInputsNamingThem) {
  auto bad = [](const std::string& spec) { return invalid_argument_of([&] { make(spec); }); };
  std::string m = bad(R"({"class_name": "Permute", "config": {"name": "p", "dims": [1, 3]}})");
  EXPECT_CONTAINS(m, "[layers] Permute layer \"p\"");
  EXPECT_CONTAINS(m, "must be consecutive and start from 1");
  EXPECT_CONTAINS(m, "dims=(1, 3)");
  m = bad(R"({"class_name": "RepeatVector", "config": {"name": "r", "n": 0}})");
  EXPECT_CONTAINS(m, "Argument `n` should be a positive integer. Received: n=0");
  m = bad(R"({"class_name": "ZeroPadding2D", "config": {"name": "z", "padding": [[1, -1], [0, 0]]}})");
  EXPECT_CONTAINS(m, "[layers] ZeroPadding2D layer \"z\"");
  EXPECT_CONTAINS(m, "padding=((1, -1), (0, 0))");
  m = bad(R"({"class_name": "ZeroPadding2D", "config": {"name": "z", "padding": [1, 2, 3]}})");
  EXPECT_CONTAINS(m, "`padding` must be one (before, after) pair");
  m = bad(R"({"class_name": "Cropping1D", "config": {"name": "c", "cropping": [1, 2, 3]}})");
  EXPECT_CONTAINS(m, "[layers] Cropping1D layer \"c\"");
  m = bad(R"({"class_name": "UpSampling2D", "config": {"name": "u", "size": [2, 0]}})");
  EXPECT_CONTAINS(m, "size=(2, 0)");
  m = bad(R"({"class_name": "UpSampling2D", "config": {"name": "u", "interpolation": "bicubic"}})");
  EXPECT_CONTAINS(m, "interpolation=\"bicubic\" is not supported: only \"nearest\" and \"bilinear\"");
  m = bad(R"({"class_name": "Cropping2D", "config": {"name": "c", "data_format": "channels_first"}})");
  EXPECT_CONTAINS(m, "channels_first");
  m = bad(R"({"class_name": "ZeroPadding1D", "config": {"name": "z", "data_format": "channels_first"}})");
  EXPECT_CONTAINS(m, "channels_first");

  auto shape_error = [](const std::string& spec, const Shape& input) {
    return invalid_argument_of([&] { make(spec)->build(input, 0, DType::Float64); });
  };
  m = shape_error(R"({"class_name": "Cropping1D", "config": {"name": "c", "cropping": [2, 2]}})", {4, 3});
  EXPECT_CONTAINS(m,
                  "`cropping` parameter of `Cropping1D` layer must be smaller than the input length. Received: "
                  "input_shape=(None, 4, 3), cropping=(2, 2)");
  m = shape_error(R"({"class_name": "Cropping2D", "config": {"name": "c", "cropping": [[0, 0], [3, 0]]}})", {4, 3, 1});
  EXPECT_CONTAINS(m, "Values in `cropping` argument should be smaller than the corresponding spatial dimension");
  m = shape_error(R"({"class_name": "RepeatVector", "config": {"name": "r", "n": 2}})", {4, 3});
  EXPECT_CONTAINS(m, "Input 0 of layer \"r\" is incompatible with the layer: expected ndim=2, found ndim=3");
  m = shape_error(R"({"class_name": "Permute", "config": {"name": "p", "dims": [2, 1]}})", {4});
  EXPECT_CONTAINS(m, "expected ndim=3, found ndim=2");
  m = shape_error(R"({"class_name": "UpSampling2D", "config": {"name": "u"}})", {4, 3});
  EXPECT_CONTAINS(m, "expected ndim=4, found ndim=3");
}

}  // namespace
}  // namespace mdtrain
