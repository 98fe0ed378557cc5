// The 1-D window layers: Conv1D (valid / same / causal, strides, dilation), MaxPooling1D,
// AveragePooling1D and GlobalAveragePooling1D with and without a mask; and the global max pools
// GlobalMaxPooling1D / GlobalMaxPooling2D (ties and NaN included). Gradients against float64
// central differences; forward values against direct 1-D loops written out here (causal padding
// included, so the reference does not share conv_math.h's geometry); Keras's shapes, config round
// trips through layer_from_config, clones, and bad arguments with their messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "mdtrain/nn/conv1d.h"
#include "mdtrain/nn/global_average_pooling1d.h"
#include "mdtrain/nn/global_max_pooling.h"
#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/pooling1d.h"
#include "gradient_check.h"

namespace mdtrain {
namespace {

using namespace testing;

template <class F>
std::string invalid_argument_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<wrong exception type> ") + e.what();
  }
  return "<no exception>";
}

// {"class_name": cls, "config": config}: what layer_from_config reads from a model file.
Json spec(const char* cls, const Json& config) {
  Json s = Json::object();
  s.set("class_name", cls);
  s.set("config", config);
  return s;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
#define EXPECT_CONTAINS(s, part) EXPECT_TRUE(contains(s, part)) << "message: " << (s) << "\nexpected: " << (part)

struct Conv1DCase {
  std::int64_t steps, channels, k, stride, dilation;
  std::string padding, activation;
};

std::vector<Conv1DCase> conv1d_cases() {
  std::vector<Conv1DCase> cases;
  for (const char* padding : {"valid", "same", "causal"})
    for (auto [k, s, d] : std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {3, 1, 1}, {3, 2, 1}, {2, 3, 1}, {3, 1, 2}})
      cases.push_back({7, 2, k, s, d, padding, "linear"});
  cases.push_back({6, 3, 3, 1, 1, "causal", "tanh"});
  cases.push_back({6, 3, 2, 1, 1, "same", "relu"});
  return cases;
}

std::string conv1d_case_name(const ::testing::TestParamInfo<Conv1DCase>& info) {
  const auto& p = info.param;
  return p.padding + "_k" + std::to_string(p.k) + "_s" + std::to_string(p.stride) + "_d" + std::to_string(p.dilation) +
         "_" + p.activation;
}

Conv1D make_conv1d(const Conv1DCase& p, std::int64_t filters = 4) {
  Conv2D::Options o;
  o.filters = filters;
  o.kernel_size = {p.k};
  o.strides = {p.stride};
  o.dilation_rate = {p.dilation};
  o.padding = p.padding;
  o.activation = p.activation;
  o.bias_initializer = "random_uniform";
  return Conv1D("conv1d", o);
}

// Pre-activations of a Conv1D by plain loops in double: z[b, o, f] = bias[f] + sum over taps j of
// x[b, o*s - pad + j*d, c] * kernel[j, c, f], with pad TF's "same" split, d*(k-1) for causal.
std::vector<double> direct_conv1d(Conv1D& conv, const Tensor& x, const Conv1DCase& p) {
  const std::int64_t batch = x.dim(0), steps = x.dim(1), cin = x.dim(2), filters = conv.options().filters;
  std::int64_t out = 0, pad = 0;
  const std::int64_t extent = (p.k - 1) * p.dilation + 1;
  if (p.padding == "valid") {
    out = (steps - extent) / p.stride + 1;
  } else if (p.padding == "same") {
    out = (steps + p.stride - 1) / p.stride;
    pad = std::max<std::int64_t>((out - 1) * p.stride + extent - steps, 0) / 2;
  } else {
    out = (steps + p.stride - 1) / p.stride;
    pad = (p.k - 1) * p.dilation;
  }
  auto value = [](const Tensor& t, std::int64_t i) {
    return t.dtype() == DType::Float64 ? t.data<double>()[i] : double(t.data<float>()[i]);
  };
  const Tensor& w = conv.kernel().value;
  const Tensor& bias = conv.bias().value;
  std::vector<double> z(static_cast<std::size_t>(batch * out * filters));
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t f = 0; f < filters; ++f) {
        double s = value(bias, f);
        for (std::int64_t j = 0; j < p.k; ++j) {
          const std::int64_t t = o * p.stride - pad + j * p.dilation;
          if (t < 0 || t >= steps) continue;
          for (std::int64_t c = 0; c < cin; ++c)
            s += value(x, (b * steps + t) * cin + c) * value(w, (j * cin + c) * filters + f);
        }
        z[static_cast<std::size_t>((b * out + o) * filters + f)] = s;
      }
  return z;
}

class Conv1DGradient : public ::testing::TestWithParam<Conv1DCase> {};

TEST_P(Conv1DGradient, MatchesFiniteDifferences) {
  const auto p = GetParam();
  std::mt19937_64 rng(31);
  Conv1D conv = make_conv1d(p);
  conv.build({p.steps, p.channels}, 7, DType::Float64);
  EXPECT_EQ(conv.kernel().value.shape(), (Shape{p.k, p.channels, 4}));
  EXPECT_EQ(check_layer_gradients(conv, random_tensor({2, p.steps, p.channels}, rng), ForwardContext{}, 41), 2u);
}

INSTANTIATE_TEST_SUITE_P(AllPaddings, Conv1DGradient, ::testing::ValuesIn(conv1d_cases()), conv1d_case_name);

class Conv1DForward : public ::testing::TestWithParam<Conv1DCase> {};

TEST_P(Conv1DForward, MatchesDirectConvolution) {
  auto p = GetParam();
  p.activation = "linear";
  std::mt19937_64 rng(32);
  for (DType dtype : {DType::Float64, DType::Float32}) {
    Conv1D conv = make_conv1d(p);
    conv.build({p.steps, p.channels}, 8, dtype);
    Tensor x = random_tensor({3, p.steps, p.channels}, rng, -1.0, 1.0, dtype);
    Tensor y = conv.forward(x, ForwardContext{});
    const auto want = direct_conv1d(conv, x, p);
    ASSERT_EQ(y.ndim(), 3);
    ASSERT_EQ(y.numel(), static_cast<std::int64_t>(want.size()));
    const double tol = dtype == DType::Float64 ? 1e-13 : 1e-5;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double got = dtype == DType::Float64 ? y.data<double>()[i] : double(y.data<float>()[i]);
      ASSERT_NEAR(got, want[i], tol) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPaddings, Conv1DForward, ::testing::ValuesIn(conv1d_cases()), conv1d_case_name);

TEST(Conv1DCausal, AnOutputDoesNotReadLaterSteps) {
  // Changing step 4 changes no output before step 4.
  std::mt19937_64 rng(33);
  Conv1D conv = make_conv1d({8, 2, 3, 1, 2, "causal", "linear"});
  conv.build({8, 2}, 9, DType::Float64);
  Tensor x = random_tensor({1, 8, 2}, rng);
  const Tensor before = conv.forward(x, ForwardContext{}).clone();
  x.data<double>()[4 * 2] += 1.0;
  const Tensor after = conv.forward(x, ForwardContext{});
  for (std::int64_t i = 0; i < 4 * 4; ++i) EXPECT_EQ(before.data<double>()[i], after.data<double>()[i]) << i;
  EXPECT_NE(before.data<double>()[4 * 4], after.data<double>()[4 * 4]);
}

TEST(Conv1DConfig, RoundTripsThroughTheFactoryAndClones) {
  Json c = Json::object();
  c.set("name", "c1");
  c.set("filters", 3);
  c.set("kernel_size", 2);  // an int, as Keras accepts: (2,)
  c.set("padding", "CAUSAL");
  c.set("dilation_rate", 2);
  c.set("activation", "relu");
  auto layer = layer_from_config(spec("Conv1D", c));
  ASSERT_EQ(layer->class_name(), "Conv1D");
  layer->build({6, 2}, 3, DType::Float64);
  EXPECT_EQ(layer->output_shape(), (Shape{6, 3}));
  const Json out = layer->config();
  EXPECT_EQ(out.at("kernel_size").dump(), "[2]");
  EXPECT_EQ(out.at("strides").dump(), "[1]");
  EXPECT_EQ(out.at("dilation_rate").dump(), "[2]");
  EXPECT_EQ(out.at("padding").as_string(), "causal");
  EXPECT_EQ(out.at("groups").as_int(), 1);
  auto copy = layer->clone();
  EXPECT_EQ(copy->class_name(), "Conv1D");
  EXPECT_EQ(copy->tensor_parallel_form(), Layer::TensorParallelForm::None);
  std::mt19937_64 rng(34);
  Tensor x = random_tensor({2, 6, 2}, rng);
  const Tensor a = layer->forward(x, ForwardContext{}).clone();
  const Tensor b = copy->forward(x, ForwardContext{});
  for (std::int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.data<double>()[i], b.data<double>()[i]);
}

TEST(Conv1DErrors, NameTheLayerTheArgumentAndTheShapes) {
  Conv2D::Options o;
  o.filters = 2;
  o.kernel_size = {3, 3};
  EXPECT_CONTAINS(invalid_argument_of([&] { Conv1D("c", o); }),
                  "[conv1d] layer \"c\": The `kernel_size` argument must be a tuple of 1 integers. Received "
                  "kernel_size=(3, 3)");
  o.kernel_size = {0};
  EXPECT_CONTAINS(invalid_argument_of([&] { Conv1D("c", o); }), "including values {0} that do not satisfy `value > 0`");
  o.kernel_size = {5};
  o.strides = {2};
  o.dilation_rate = {2};
  EXPECT_CONTAINS(invalid_argument_of([&] { Conv1D("c", o); }),
                  "`strides > 1` not supported in conjunction with `dilation_rate > 1`");
  o.strides = {1};
  o.padding = "full";
  EXPECT_CONTAINS(invalid_argument_of([&] { Conv1D("c", o); }),
                  "must be one of \"valid\", \"same\", \"causal\". Received: padding=full");
  o.padding = "valid";
  Conv1D conv("c", o);
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    conv.build({3, 2}, 1, DType::Float64);
                  }),
                  "[conv1d] layer \"c\": kernel_size (5,) (dilated by dilation_rate (2,) to (9,)) is larger than the "
                  "input's spatial size (3,) with padding=\"valid\". Received input shape (None, 3, 2)");
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    conv.build({3, 4, 2}, 1, DType::Float64);
                  }),
                  "[conv1d] Input 0 of layer \"c\" is incompatible with the layer: expected ndim=3, found ndim=4");
  Conv1D ok("c", [] {
    Conv2D::Options p;
    p.filters = 2;
    p.kernel_size = {2};
    p.strides = {1};
    p.dilation_rate = {1};
    return p;
  }());
  ok.build({4, 2}, 1, DType::Float64);
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    ok.forward(Tensor({1, 4, 3}, DType::Float64), ForwardContext{});
                  }),
                  "expected axis -1 of input shape to have value 2, but received input with shape (1, 4, 3)");
  // Conv2D keeps refusing causal padding, as Keras does for 2-D convolutions.
  Conv2D::Options o2;
  o2.filters = 2;
  o2.kernel_size = {2, 2};
  o2.padding = "causal";
  EXPECT_CONTAINS(invalid_argument_of([&] { Conv2D("c2", o2); }),
                  "must be one of \"valid\", \"same\". Received: padding=causal");
  Json c = Json::object();
  c.set("name", "g");
  c.set("filters", 2);
  c.set("kernel_size", 2);
  c.set("groups", 2);
  EXPECT_CONTAINS(invalid_argument_of([&] { layer_from_config(spec("Conv1D", c)); }),
                  "[layers] Conv1D \"g\": groups other than 1 are not supported");
}

// ---- pooling ---------------------------------------------------------------------------------------

Tensor distinct_values(const Shape& shape, std::mt19937_64& rng) {
  Tensor t(shape, DType::Float64);
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01 * static_cast<double>(i) - 0.3;
  std::shuffle(v.begin(), v.end(), rng);
  std::copy(v.begin(), v.end(), t.data<double>());
  return t;
}

struct Pool1DCase {
  std::int64_t steps, pool, stride;
  std::string padding;
};

class Pooling1DTest : public ::testing::TestWithParam<Pool1DCase> {};

Pooling2D::Options pool_options(const Pool1DCase& p) {
  Pooling2D::Options o;
  o.pool_size = {p.pool};
  o.strides = {p.stride};
  o.padding = p.padding;
  return o;
}

TEST_P(Pooling1DTest, GradientsMatchFiniteDifferences) {
  const auto p = GetParam();
  std::mt19937_64 rng(35);
  MaxPooling1D max_pool("max_pooling1d", pool_options(p));
  max_pool.build({p.steps, 3}, 1, DType::Float64);
  check_layer_gradients(max_pool, distinct_values({2, p.steps, 3}, rng), ForwardContext{}, 42);
  AveragePooling1D avg_pool("average_pooling1d", pool_options(p));
  avg_pool.build({p.steps, 3}, 1, DType::Float64);
  check_layer_gradients(avg_pool, random_tensor({2, p.steps, 3}, rng), ForwardContext{}, 43);
}

TEST_P(Pooling1DTest, ForwardMatchesDirectLoops) {
  const auto p = GetParam();
  std::mt19937_64 rng(36);
  const std::int64_t channels = 2;
  MaxPooling1D max_pool("m", pool_options(p));
  AveragePooling1D avg_pool("a", pool_options(p));
  max_pool.build({p.steps, channels}, 1, DType::Float64);
  avg_pool.build({p.steps, channels}, 1, DType::Float64);
  Tensor x = random_tensor({2, p.steps, channels}, rng);
  const Tensor ym = max_pool.forward(x, ForwardContext{});
  const Tensor ya = avg_pool.forward(x, ForwardContext{});
  const bool same = p.padding == "same";
  const std::int64_t out = same ? (p.steps + p.stride - 1) / p.stride : (p.steps - p.pool) / p.stride + 1;
  const std::int64_t pad = same ? std::max<std::int64_t>((out - 1) * p.stride + p.pool - p.steps, 0) / 2 : 0;
  ASSERT_EQ(ym.shape(), (Shape{2, out, channels}));
  ASSERT_EQ(ya.shape(), (Shape{2, out, channels}));
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t c = 0; c < channels; ++c) {
        double best = -1e300, sum = 0;
        int n = 0;
        for (std::int64_t j = 0; j < p.pool; ++j) {
          const std::int64_t t = o * p.stride - pad + j;
          if (t < 0 || t >= p.steps) continue;
          const double v = x.data<double>()[(b * p.steps + t) * channels + c];
          best = std::max(best, v);
          sum += v;
          ++n;
        }
        const std::int64_t i = (b * out + o) * channels + c;
        EXPECT_EQ(ym.data<double>()[i], best) << i;
        EXPECT_NEAR(ya.data<double>()[i], sum / n, 1e-15) << i;
      }
}

INSTANTIATE_TEST_SUITE_P(Geometries, Pooling1DTest,
                         ::testing::Values(Pool1DCase{7, 2, 2, "valid"}, Pool1DCase{7, 2, 2, "same"},
                                           Pool1DCase{8, 3, 1, "valid"}, Pool1DCase{8, 3, 2, "same"},
                                           Pool1DCase{5, 4, 3, "same"}));

TEST(Pooling1DConfig, KerasDefaultsAndRoundTrip) {
  Json c = Json::object();
  c.set("name", "p");
  auto layer = layer_from_config(spec("MaxPooling1D", c));
  layer->build({9, 2}, 1, DType::Float64);
  EXPECT_EQ(layer->output_shape(), (Shape{4, 2}));  // pool_size 2, strides None: 2
  EXPECT_EQ(layer->config().at("pool_size").dump(), "[2]");
  EXPECT_EQ(layer->config().at("strides").dump(), "[2]");
  EXPECT_EQ(layer->clone()->class_name(), "MaxPooling1D");
  c.set("pool_size", 3);
  c.set("strides", 1);
  c.set("padding", "same");
  auto avg = layer_from_config(spec("AveragePooling1D", c));
  avg->build({9, 2}, 1, DType::Float64);
  EXPECT_EQ(avg->output_shape(), (Shape{9, 2}));
  EXPECT_EQ(avg->clone()->class_name(), "AveragePooling1D");
  EXPECT_EQ(avg->config().at("padding").as_string(), "same");
}

TEST(Pooling1DErrors, NameTheLayerTheArgumentAndTheShapes) {
  Pooling2D::Options o;
  o.pool_size = {2, 2};
  EXPECT_CONTAINS(invalid_argument_of([&] { MaxPooling1D("m", o); }),
                  "[max_pooling1d] layer \"m\": The `pool_size` argument must be a tuple of 1 integers");
  o.pool_size = {4};
  AveragePooling1D a("a", o);
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    a.build({3, 2}, 1, DType::Float64);
                  }),
                  "[average_pooling1d] layer \"a\": pool_size (4,) is larger than the input's spatial size (3,)");
  EXPECT_CONTAINS(invalid_argument_of([&] { a.build({3, 3, 2}, 1, DType::Float64); }), "expected ndim=3, found ndim=4");
}

// ---- global average pooling ----------------------------------------------------------------------

Tensor mask_of(const std::vector<double>& values, std::int64_t batch, std::int64_t steps) {
  Tensor m({batch, steps}, DType::Float64);
  std::copy(values.begin(), values.end(), m.data<double>());
  return m;
}

TEST(GlobalAveragePooling1DGradient, MatchesFiniteDifferencesWithAndWithoutAMask) {
  std::mt19937_64 rng(37);
  for (bool keepdims : {false, true}) {
    GlobalAveragePooling1D gap("global_average_pooling1d", keepdims);
    gap.build({5, 3}, 1, DType::Float64);
    check_layer_gradients(gap, random_tensor({2, 5, 3}, rng), ForwardContext{}, 44);
    gap.set_input_mask(mask_of({1, 1, 0, 1, 0, 0, 1, 1, 1, 1}, 2, 5));
    check_layer_gradients(gap, random_tensor({2, 5, 3}, rng), ForwardContext{}, 45);
  }
}

TEST(GlobalAveragePooling1DMask, MaskedStepsAreLeftOutEvenWhenNotFinite) {
  GlobalAveragePooling1D gap("gap");
  gap.build({3, 2}, 1, DType::Float64);
  Tensor x({3, 3, 2}, DType::Float64);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> v{1, 2, 3, 4, nan, 1e300 * 10,  // sequence 0: step 2 masked, holds NaN / Inf
                              5, 6, 7, 8, 9,   10,          // sequence 1: only step 1 kept
                              1, 1, 1, 1, 1,   1};          // sequence 2: every step masked
  std::copy(v.begin(), v.end(), x.data<double>());
  gap.set_input_mask(mask_of({1, 1, 0, 0, 1, 0, 0, 0, 0}, 3, 3));
  const Tensor y = gap.forward(x, ForwardContext{});
  ASSERT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.data<double>()[0], 2.0);
  EXPECT_EQ(y.data<double>()[1], 3.0);
  EXPECT_EQ(y.data<double>()[2], 7.0);
  EXPECT_EQ(y.data<double>()[3], 8.0);
  EXPECT_TRUE(std::isnan(y.data<double>()[4]));  // 0 / 0, as Keras
  Tensor dy({3, 2}, DType::Float64);
  dy.fill(1.0);
  const Tensor dx = gap.backward(dy, true);
  const std::vector<double> want{0.5, 0.5, 0.5, 0.5, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(dx.data<double>()[i], want[i]) << i;
  EXPECT_FALSE(gap.output_masked(true));
  EXPECT_FALSE(gap.output_mask().defined());
  // Without a mask again: the plain mean.
  gap.set_input_mask(Tensor());
  EXPECT_EQ(gap.forward(x, ForwardContext{}).data<double>()[2], 7.0);
}

TEST(GlobalAveragePooling1DErrors, AndConfig) {
  GlobalAveragePooling1D gap("g");
  gap.build({4, 2}, 1, DType::Float64);
  gap.set_input_mask(mask_of({1, 1, 1}, 1, 3));
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    gap.forward(Tensor({1, 4, 2}, DType::Float64), ForwardContext{});
                  }),
                  "[global_average_pooling1d] layer \"g\": the mask must be (batch, timesteps) = (1, 4) of its input, "
                  "got (1, 3)");
  EXPECT_CONTAINS(invalid_argument_of([&] { GlobalAveragePooling1D("g", false, "channels_first"); }),
                  "data_format=\"channels_first\" is not supported");
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    GlobalAveragePooling1D("g").build({4, 2, 2}, 1);
                  }),
                  "expected ndim=3, found ndim=4");
  Json c = Json::object();
  c.set("name", "g");
  c.set("keepdims", true);
  auto layer = layer_from_config(spec("GlobalAveragePooling1D", c));
  layer->build({4, 2}, 1);
  EXPECT_EQ(layer->output_shape(), (Shape{1, 2}));
  EXPECT_TRUE(layer->config().at("keepdims").as_bool());
  EXPECT_EQ(layer->clone()->class_name(), "GlobalAveragePooling1D");
}

// ---- global max pooling ---------------------------------------------------------------------------

TEST(GlobalMaxPoolingGradient, MatchesFiniteDifferences) {
  std::mt19937_64 rng(38);
  for (bool keepdims : {false, true}) {
    GlobalMaxPooling1D pool1("global_max_pooling1d", keepdims);
    pool1.build({6, 3}, 1, DType::Float64);
    EXPECT_EQ(pool1.output_shape(), keepdims ? (Shape{1, 3}) : (Shape{3}));
    check_layer_gradients(pool1, distinct_values({2, 6, 3}, rng), ForwardContext{}, 46);
    GlobalMaxPooling2D pool2("global_max_pooling2d", keepdims);
    pool2.build({3, 4, 2}, 1, DType::Float64);
    EXPECT_EQ(pool2.output_shape(), keepdims ? (Shape{1, 1, 2}) : (Shape{2}));
    check_layer_gradients(pool2, distinct_values({2, 3, 4, 2}, rng), ForwardContext{}, 47);
  }
}

TEST(GlobalMaxPooling, ForwardIsTheMaximumAndTiesAndNaNGoToTheFirst) {
  GlobalMaxPooling1D pool("p");
  pool.build({4, 3}, 1, DType::Float64);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x({1, 4, 3}, DType::Float64);
  const std::vector<double> v{1, -5, 0,    //
                              3, -5, nan,  //
                              3, -7, 2,    //
                              2, -6, nan};
  std::copy(v.begin(), v.end(), x.data<double>());
  const Tensor y = pool.forward(x, ForwardContext{});
  EXPECT_EQ(y.data<double>()[0], 3.0);
  EXPECT_EQ(y.data<double>()[1], -5.0);
  EXPECT_TRUE(std::isnan(y.data<double>()[2]));
  Tensor dy({1, 3}, DType::Float64);
  dy.data<double>()[0] = 10;
  dy.data<double>()[1] = 20;
  dy.data<double>()[2] = 30;
  const Tensor dx = pool.backward(dy, true);
  // Channel 0: the tie of steps 1 and 2 goes to step 1; channel 1 (tie of 0 and 1) to step 0;
  // channel 2: the first NaN (step 1).
  const std::vector<double> want{0, 20, 0, 10, 0, 30, 0, 0, 0, 0, 0, 0};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(dx.data<double>()[i], want[i]) << i;
}

TEST(GlobalMaxPooling, ConfigClonesAndErrors) {
  Json c = Json::object();
  c.set("name", "g");
  c.set("keepdims", true);
  auto one = layer_from_config(spec("GlobalMaxPooling1D", c));
  auto two = layer_from_config(spec("GlobalMaxPooling2D", c));
  one->build({5, 2}, 1, DType::Float64);
  two->build({5, 4, 2}, 1, DType::Float64);
  EXPECT_EQ(one->output_shape(), (Shape{1, 2}));
  EXPECT_EQ(two->output_shape(), (Shape{1, 1, 2}));
  EXPECT_TRUE(two->config().at("keepdims").as_bool());
  EXPECT_EQ(two->config().at("data_format").as_string(), "channels_last");
  EXPECT_EQ(one->clone()->class_name(), "GlobalMaxPooling1D");
  EXPECT_EQ(two->clone()->class_name(), "GlobalMaxPooling2D");
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    GlobalMaxPooling1D("p").build({5, 4, 2}, 1);
                  }),
                  "[global_max_pooling1d] Input 0 of layer \"p\" is incompatible with the layer: expected ndim=3, "
                  "found ndim=4");
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    GlobalMaxPooling2D("p").build({5, 2}, 1);
                  }),
                  "[global_max_pooling2d] Input 0 of layer \"p\" is incompatible with the layer: expected ndim=4, "
                  "found ndim=3");
  EXPECT_CONTAINS(invalid_argument_of([&] { GlobalMaxPooling2D("p", false, "channels_first"); }),
                  "[global_max_pooling2d] layer \"p\": data_format=\"channels_first\" is not supported");
}

}  // namespace
}  // namespace mdtrain
