// The convolution variants: Conv2DTranspose / Conv1DTranspose (valid and same padding, strides,
// dilation, output_padding), DepthwiseConv2D and SeparableConv2D (depth multipliers, strides,
// dilation). Forward values against naive float64 loops written out here (a scatter for the
// transposed convolution, with Keras's output size and TF's padding recomputed independently of
// conv_math.h), gradients against float64 central differences (several chunks of images too),
// Keras's output shapes, config round trips through layer_from_config, clones, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "mdtrain/nn/conv_transpose.h"
#include "mdtrain/nn/depthwise_conv2d.h"
#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/separable_conv2d.h"

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

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
#define EXPECT_CONTAINS(s, part) EXPECT_TRUE(contains(s, part)) << "message: " << (s) << "\nexpected: " << (part)

double value(const Tensor& t, std::int64_t i) {
  return t.dtype() == DType::Float64 ? t.data<double>()[i] : double(t.data<float>()[i]);
}

void expect_near_all(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<std::int64_t>(want.size())) << what;
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(value(got, static_cast<std::int64_t>(i)), want[i], tol) << what << " [" << i << "]";
}

// ---- transposed convolutions ---------------------------------------------------------------

struct TransposeCase {
  std::int64_t h, w, k_h, k_w, s_h, s_w, d_h, d_w;
  std::string padding;
  std::vector<std::int64_t> output_padding;  // empty: None
  std::string activation = "linear";
};

std::vector<TransposeCase> transpose_cases() {
  return {
      {3, 4, 3, 3, 1, 1, 1, 1, "valid", {}},        {3, 4, 3, 2, 2, 2, 1, 1, "valid", {}},
      {3, 4, 3, 3, 2, 2, 1, 1, "same", {}},         {3, 4, 4, 4, 2, 2, 1, 1, "same", {}},
      {3, 4, 4, 3, 2, 3, 1, 1, "same", {1, 2}},     {3, 4, 3, 3, 2, 2, 1, 1, "valid", {1, 0}},
      {3, 4, 1, 1, 3, 2, 1, 1, "valid", {}},        {4, 3, 3, 2, 1, 1, 2, 2, "valid", {}},
      {4, 3, 3, 3, 1, 1, 2, 1, "same", {}},         {2, 3, 2, 3, 3, 3, 1, 1, "same", {2, 1}, "tanh"},
      {3, 3, 3, 3, 2, 2, 1, 1, "same", {}, "relu"},
  };
}

std::string transpose_name(const ::testing::TestParamInfo<TransposeCase>& info) {
  const auto& p = info.param;
  std::string op =
      p.output_padding.empty() ? "none" : std::to_string(p.output_padding[0]) + std::to_string(p.output_padding[1]);
  return p.padding + "_k" + std::to_string(p.k_h) + std::to_string(p.k_w) + "_s" + std::to_string(p.s_h) +
         std::to_string(p.s_w) + "_d" + std::to_string(p.d_h) + std::to_string(p.d_w) + "_op" + op + "_" + p.activation;
}

Conv2DTranspose::Options transpose_options(const TransposeCase& p, std::int64_t filters) {
  Conv2DTranspose::Options o;
  o.filters = filters;
  o.kernel_size = {p.k_h, p.k_w};
  o.strides = {p.s_h, p.s_w};
  o.dilation_rate = {p.d_h, p.d_w};
  o.padding = p.padding;
  o.output_padding = p.output_padding;
  o.activation = p.activation;
  o.bias_initializer = "random_uniform";
  return o;
}

// Keras's output size and TF's padding of the convolution it transposes, for one axis.
struct Axis {
  std::int64_t out, pad;
};
Axis transpose_axis(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d, bool same, std::int64_t op) {
  const std::int64_t e = (k - 1) * d + 1;
  std::int64_t out;
  if (!same) out = (in - 1) * s + e + (op < 0 ? std::max(e, s) - e : op);
  else out = op < 0 ? in * s : (in - 1) * s + e % 2 + op;
  const std::int64_t pad = same ? std::max<std::int64_t>((in - 1) * s + e - out, 0) / 2 : 0;
  return {out, pad};
}

// z (before the activation) by scattering every input pixel through every kernel tap in float64:
// input (i, j) with tap (a, b) lands on output (i*s - pad + a*d, j*s - pad + b*d).
std::vector<double> naive_transpose(Conv2DTranspose& layer, const Tensor& x, const TransposeCase& p, Axis ah, Axis aw) {
  const std::int64_t batch = x.dim(0), cin = x.dim(3), f = layer.options().filters;
  const Tensor& w = layer.kernel().value;  // (kh, kw, f, cin)
  std::vector<double> z(static_cast<std::size_t>(batch * ah.out * aw.out * f));
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t o = 0; o < ah.out * aw.out; ++o)
      for (std::int64_t q = 0; q < f; ++q)
        z[static_cast<std::size_t>((b * ah.out * aw.out + o) * f + q)] = value(layer.bias().value, q);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < p.h; ++i)
      for (std::int64_t j = 0; j < p.w; ++j)
        for (std::int64_t a = 0; a < p.k_h; ++a)
          for (std::int64_t c = 0; c < p.k_w; ++c) {
            const std::int64_t oh = i * p.s_h - ah.pad + a * p.d_h, ow = j * p.s_w - aw.pad + c * p.d_w;
            if (oh < 0 || oh >= ah.out || ow < 0 || ow >= aw.out) continue;
            for (std::int64_t q = 0; q < f; ++q)
              for (std::int64_t ci = 0; ci < cin; ++ci)
                z[static_cast<std::size_t>(((b * ah.out + oh) * aw.out + ow) * f + q)] +=
                    value(x, ((b * p.h + i) * p.w + j) * cin + ci) * value(w, ((a * p.k_w + c) * f + q) * cin + ci);
          }
  return z;
}

class Conv2DTransposeForward : public ::testing::TestWithParam<TransposeCase> {};

TEST_P(Conv2DTransposeForward, MatchesTheNaiveScatterWithKerassOutputShape) {
  auto p = GetParam();
  p.activation = "linear";
  const bool same = p.padding == "same";
  const Axis ah = transpose_axis(p.h, p.k_h, p.s_h, p.d_h, same, p.output_padding.empty() ? -1 : p.output_padding[0]);
  const Axis aw = transpose_axis(p.w, p.k_w, p.s_w, p.d_w, same, p.output_padding.empty() ? -1 : p.output_padding[1]);
  std::mt19937_64 rng(61);
  for (DType dtype : {DType::Float64, DType::Float32})
    for (std::int64_t budget : {std::int64_t{0}, std::int64_t{1}}) {  // 1 byte: one image per chunk
      Conv2DTranspose layer("t", transpose_options(p, 3));
      if (budget) layer.set_column_budget_bytes(budget);
      layer.build({p.h, p.w, 2}, 5, dtype);
      EXPECT_EQ(layer.kernel().value.shape(), (Shape{p.k_h, p.k_w, 3, 2}));
      EXPECT_EQ(layer.output_shape(), (Shape{ah.out, aw.out, 3}));
      const Tensor x = random_tensor({3, p.h, p.w, 2}, rng, -1.0, 1.0, dtype);
      const Tensor y = layer.forward(x, ForwardContext{});
      expect_near_all(y, naive_transpose(layer, x, p, ah, aw), dtype == DType::Float64 ? 1e-13 : 1e-5,
                      cat(name_of(dtype), " budget ", budget));
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, Conv2DTransposeForward, ::testing::ValuesIn(transpose_cases()), transpose_name);

class Conv2DTransposeGradient : public ::testing::TestWithParam<TransposeCase> {};

TEST_P(Conv2DTransposeGradient, MatchesFiniteDifferencesInOneChunkAndInMany) {
  const auto p = GetParam();
  std::mt19937_64 rng(62);
  for (std::int64_t budget : {std::int64_t{0}, std::int64_t{1}}) {
    Conv2DTranspose layer("t", transpose_options(p, 3));
    if (budget) layer.set_column_budget_bytes(budget);
    layer.build({p.h, p.w, 2}, 6, DType::Float64);
    EXPECT_EQ(check_layer_gradients(layer, random_tensor({3, p.h, p.w, 2}, rng), ForwardContext{}, 63), 2u);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Conv2DTransposeGradient, ::testing::ValuesIn(transpose_cases()), transpose_name);

TEST(Conv1DTranspose, IsTheOneRowConv2DTranspose) {
  // The same kernel memory (k, filters, in) = (1, k, filters, in) gives the same values.
  std::mt19937_64 rng(64);
  for (const TransposeCase& p : transpose_cases()) {
    SCOPED_TRACE(transpose_name({p, 0}));
    Conv2DTranspose::Options o1 = transpose_options(p, 3), o2 = transpose_options(p, 3);
    o1.kernel_size = {p.k_w}, o1.strides = {p.s_w}, o1.dilation_rate = {p.d_w};
    if (!o1.output_padding.empty()) o1.output_padding = {p.output_padding[1]};
    o2.kernel_size = {1, p.k_w}, o2.strides = {1, p.s_w}, o2.dilation_rate = {1, p.d_w};
    if (!o2.output_padding.empty()) o2.output_padding = {0, p.output_padding[1]};
    if (p.padding == "same" && o2.output_padding.empty()) o2.output_padding = {};  // (1 - 1) * 1 + 1 = 1 row
    Conv1DTranspose one("t1", o1);
    Conv2DTranspose two("t2", o2);
    one.build({p.w, 2}, 9, DType::Float64);
    two.build({1, p.w, 2}, 9, DType::Float64);
    ASSERT_EQ(one.kernel().value.shape(), (Shape{p.k_w, 3, 2}));
    ASSERT_EQ(one.output_shape(), (Shape{two.output_shape()[1], 3}));
    two.kernel().value.copy_from(one.kernel().value.reshape({1, p.k_w, 3, 2}));
    two.bias().value.copy_from(one.bias().value);
    const Tensor x = random_tensor({2, p.w, 2}, rng);
    const Tensor a = one.forward(x, ForwardContext{});
    const Tensor b = two.forward(x.reshape({2, 1, p.w, 2}), ForwardContext{});
    ASSERT_EQ(a.numel(), b.numel());
    for (std::int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<double>()[i], b.data<double>()[i]) << i;
    EXPECT_EQ(check_layer_gradients(one, x, ForwardContext{}, 65), 2u);
  }
}

TEST(Conv2DTransposeShape, IsKerassForTheCasesTensorFlowRuns) {
  // Output shapes Keras 3 on TF gives for a 4x5 input.
  struct Want {
    std::vector<std::int64_t> k, s, d, op;
    std::string padding;
    Shape out;
  };
  for (const Want& c : std::vector<Want>{{{3, 3}, {1, 1}, {2, 2}, {}, "valid", {8, 9, 2}},
                                         {{4, 4}, {2, 2}, {1, 1}, {1, 1}, "same", {7, 9, 2}},
                                         {{3, 3}, {3, 3}, {1, 1}, {2, 2}, "same", {12, 15, 2}},
                                         {{1, 1}, {3, 3}, {1, 1}, {}, "valid", {12, 15, 2}},
                                         {{3, 3}, {2, 2}, {1, 1}, {}, "same", {8, 10, 2}}}) {
    Conv2DTranspose::Options o;
    o.filters = 2, o.kernel_size = c.k, o.strides = c.s, o.dilation_rate = c.d, o.output_padding = c.op;
    o.padding = c.padding;
    Conv2DTranspose layer("t", o);
    EXPECT_EQ(layer.compute_output_shape({4, 5, 3}), c.out);
  }
}

TEST(Conv2DTransposeErrors, NameTheLayerAndTheArgument) {
  Conv2DTranspose::Options o;
  o.filters = 2, o.kernel_size = {2, 2}, o.strides = {2, 2}, o.padding = "same", o.output_padding = {0, 0};
  // An even kernel with same padding and output_padding 0 has no transposed convolution (TF fails).
  const std::string even = invalid_argument_of([&] { Conv2DTranspose("t", o).compute_output_shape({4, 5, 3}); });
  EXPECT_CONTAINS(even, "[conv2d_transpose] layer \"t\": padding=\"same\" with kernel_size (2, 2)");
  EXPECT_CONTAINS(even, "not to the input's spatial size (4, 5)");
  o.output_padding = {2, 0};
  EXPECT_CONTAINS(invalid_argument_of([&] { Conv2DTranspose("t", o); }),
                  "`output_padding` must be strictly less than `strides` for all dimensions. At dimension 0, "
                  "`output_padding` is 2 but `strides` is 2");
  o.output_padding = {-1, 0};
  EXPECT_CONTAINS(invalid_argument_of([&] { Conv2DTranspose("t", o); }),
                  "The `output_padding` argument must be a tuple of 2 integers. Received output_padding=(-1, 0), "
                  "including values {-1} that do not satisfy `value >= 0`");
  o.output_padding = {};
  o.dilation_rate = {2, 2};
  EXPECT_CONTAINS(invalid_argument_of([&] { Conv2DTranspose("t", o); }),
                  "`strides > 1` not supported in conjunction with `dilation_rate > 1`");
  o.dilation_rate = {1, 1};
  o.padding = "causal";
  EXPECT_CONTAINS(invalid_argument_of([&] { Conv2DTranspose("t", o); }),
                  "The `padding` argument must be one of \"valid\", \"same\". Received: padding=causal");
  o.padding = "valid";
  o.data_format = "channels_first";
  EXPECT_CONTAINS(invalid_argument_of([&] { Conv2DTranspose("t", o); }), "channels_first\" is not supported");
  o.data_format = "channels_last";
  Conv2DTranspose layer("t", o);
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    layer.compute_output_shape({4, 5});
                  }),
                  "[conv2d_transpose] Input 0 of layer \"t\" is incompatible with the layer: expected ndim=4, found "
                  "ndim=3");
  Conv2DTranspose::Options o1;
  o1.filters = 2, o1.kernel_size = {3, 3}, o1.strides = {1}, o1.dilation_rate = {1};
  EXPECT_CONTAINS(invalid_argument_of([&] { Conv1DTranspose("t", o1); }),
                  "[conv1d_transpose] layer \"t\": The `kernel_size` argument must be a tuple of 1 integers");
}

// ---- depthwise and separable ---------------------------------------------------------------

struct DepthwiseCase {
  std::int64_t h, w, c, k_h, k_w, s_h, s_w, d_h, d_w, dm;
  std::string padding, activation = "linear";
};

std::vector<DepthwiseCase> depthwise_cases() {
  return {
      {5, 6, 2, 3, 3, 1, 1, 1, 1, 1, "valid"},        {5, 6, 3, 3, 3, 1, 1, 1, 1, 2, "same"},
      {6, 7, 2, 3, 2, 2, 3, 1, 1, 3, "same"},         {7, 6, 2, 3, 3, 2, 2, 1, 1, 1, "valid"},
      {7, 7, 2, 3, 3, 1, 1, 2, 2, 2, "same"},         {6, 7, 1, 2, 3, 1, 1, 2, 1, 1, "valid", "relu"},
      {4, 5, 2, 3, 3, 1, 1, 1, 1, 2, "same", "tanh"},
  };
}

std::string depthwise_name(const ::testing::TestParamInfo<DepthwiseCase>& info) {
  const auto& p = info.param;
  return p.padding + "_k" + std::to_string(p.k_h) + std::to_string(p.k_w) + "_s" + std::to_string(p.s_h) +
         std::to_string(p.s_w) + "_d" + std::to_string(p.d_h) + std::to_string(p.d_w) + "_dm" + std::to_string(p.dm) +
         "_" + p.activation;
}

template <class Options>
void set_window(Options& o, const DepthwiseCase& p) {
  o.kernel_size = {p.k_h, p.k_w};
  o.strides = {p.s_h, p.s_w};
  o.dilation_rate = {p.d_h, p.d_w};
  o.padding = p.padding;
  o.depth_multiplier = p.dm;
  o.activation = p.activation;
  o.bias_initializer = "random_uniform";
}

// One axis's output size and "before" padding, TF's formulas.
Axis conv_axis(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d, bool same) {
  const std::int64_t e = (k - 1) * d + 1;
  if (!same) return {(in - e) / s + 1, 0};
  const std::int64_t out = (in + s - 1) / s;
  return {out, std::max<std::int64_t>((out - 1) * s + e - in, 0) / 2};
}

// The depthwise convolution in float64 loops: out[b, i, j, c*dm + m] = sum over taps of
// x[b, i*s - pad + a*d, j*s - pad + t*d, c] * kernel[a, t, c, m] (+ bias when given).
std::vector<double> naive_depthwise(const Tensor& x, const Tensor& kernel, const Tensor* bias, const DepthwiseCase& p) {
  const Axis ah = conv_axis(p.h, p.k_h, p.s_h, p.d_h, p.padding == "same");
  const Axis aw = conv_axis(p.w, p.k_w, p.s_w, p.d_w, p.padding == "same");
  const std::int64_t batch = x.dim(0), oc = p.c * p.dm;
  std::vector<double> y(static_cast<std::size_t>(batch * ah.out * aw.out * oc));
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < ah.out; ++i)
      for (std::int64_t j = 0; j < aw.out; ++j)
        for (std::int64_t c = 0; c < p.c; ++c)
          for (std::int64_t m = 0; m < p.dm; ++m) {
            double s = bias ? value(*bias, c * p.dm + m) : 0.0;
            for (std::int64_t a = 0; a < p.k_h; ++a)
              for (std::int64_t t = 0; t < p.k_w; ++t) {
                const std::int64_t ih = i * p.s_h - ah.pad + a * p.d_h, iw = j * p.s_w - aw.pad + t * p.d_w;
                if (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) continue;
                s += value(x, ((b * p.h + ih) * p.w + iw) * p.c + c) *
                     value(kernel, ((a * p.k_w + t) * p.c + c) * p.dm + m);
              }
            y[static_cast<std::size_t>(((b * ah.out + i) * aw.out + j) * oc + c * p.dm + m)] = s;
          }
  return y;
}

class DepthwiseConv2DTest : public ::testing::TestWithParam<DepthwiseCase> {};

TEST_P(DepthwiseConv2DTest, ForwardMatchesNaiveLoopsAndGradientsFiniteDifferences) {
  const auto p = GetParam();
  std::mt19937_64 rng(71);
  for (DType dtype : {DType::Float64, DType::Float32}) {
    DepthwiseConv2D::Options o;
    set_window(o, p);
    o.activation = "linear";
    DepthwiseConv2D layer("dw", o);
    layer.build({p.h, p.w, p.c}, 3, dtype);
    EXPECT_EQ(layer.kernel().value.shape(), (Shape{p.k_h, p.k_w, p.c, p.dm}));
    EXPECT_EQ(layer.kernel().name, "dw/kernel");  // Keras 3's name
    EXPECT_EQ(layer.bias().value.shape(), (Shape{p.c * p.dm}));
    const Tensor x = random_tensor({2, p.h, p.w, p.c}, rng, -1.0, 1.0, dtype);
    const Tensor y = layer.forward(x, ForwardContext{});
    expect_near_all(y, naive_depthwise(x, layer.kernel().value, &layer.bias().value, p),
                    dtype == DType::Float64 ? 1e-13 : 1e-5, name_of(dtype));
  }
  DepthwiseConv2D::Options o;
  set_window(o, p);
  DepthwiseConv2D layer("dw", o);
  layer.build({p.h, p.w, p.c}, 4, DType::Float64);
  EXPECT_EQ(check_layer_gradients(layer, random_tensor({2, p.h, p.w, p.c}, rng), ForwardContext{}, 72), 2u);
}

INSTANTIATE_TEST_SUITE_P(Cases, DepthwiseConv2DTest, ::testing::ValuesIn(depthwise_cases()), depthwise_name);

class SeparableConv2DTest : public ::testing::TestWithParam<DepthwiseCase> {};

TEST_P(SeparableConv2DTest, ForwardIsDepthwiseThenPointwiseAndGradientsFiniteDifferences) {
  const auto p = GetParam();
  std::mt19937_64 rng(73);
  const std::int64_t filters = 3;
  for (DType dtype : {DType::Float64, DType::Float32}) {
    SeparableConv2D::Options o;
    set_window(o, p);
    o.activation = "linear";
    o.filters = filters;
    SeparableConv2D layer("sep", o);
    layer.build({p.h, p.w, p.c}, 3, dtype);
    const auto params = layer.parameters();
    ASSERT_EQ(params.size(), 3u);
    EXPECT_EQ(params[0]->name, "sep/depthwise_kernel");
    EXPECT_EQ(params[0]->value.shape(), (Shape{p.k_h, p.k_w, p.c, p.dm}));
    EXPECT_EQ(params[1]->name, "sep/pointwise_kernel");
    EXPECT_EQ(params[1]->value.shape(), (Shape{1, 1, p.c * p.dm, filters}));
    EXPECT_EQ(params[2]->name, "sep/bias");
    const Tensor x = random_tensor({2, p.h, p.w, p.c}, rng, -1.0, 1.0, dtype);
    const Tensor y = layer.forward(x, ForwardContext{});
    const std::vector<double> mid = naive_depthwise(x, layer.depthwise_kernel().value, nullptr, p);
    const std::int64_t mc = p.c * p.dm, rows = static_cast<std::int64_t>(mid.size()) / mc;
    std::vector<double> want(static_cast<std::size_t>(rows * filters));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t f = 0; f < filters; ++f) {
        double s = value(layer.bias().value, f);
        for (std::int64_t k = 0; k < mc; ++k)
          s += mid[static_cast<std::size_t>(r * mc + k)] * value(layer.pointwise_kernel().value, k * filters + f);
        want[static_cast<std::size_t>(r * filters + f)] = s;
      }
    expect_near_all(y, want, dtype == DType::Float64 ? 1e-13 : 1e-5, name_of(dtype));
  }
  SeparableConv2D::Options o;
  set_window(o, p);
  o.filters = filters;
  SeparableConv2D layer("sep", o);
  layer.build({p.h, p.w, p.c}, 4, DType::Float64);
  EXPECT_EQ(check_layer_gradients(layer, random_tensor({2, p.h, p.w, p.c}, rng), ForwardContext{}, 74), 3u);
}

INSTANTIATE_TEST_SUITE_P(Cases, SeparableConv2DTest, ::testing::ValuesIn(depthwise_cases()), depthwise_name);

TEST(DepthwiseAndSeparableErrors, NameTheLayerAndTheArgument) {
  DepthwiseConv2D::Options o;
  o.kernel_size = {3, 3};
  o.depth_multiplier = 0;
  EXPECT_CONTAINS(invalid_argument_of([&] { DepthwiseConv2D("dw", o); }),
                  "[depthwise_conv2d] layer \"dw\": Invalid value for argument `depth_multiplier`. Expected a "
                  "strictly positive value. Received depth_multiplier=0.");
  o.depth_multiplier = 1;
  o.strides = {2, 2};
  o.dilation_rate = {2, 2};
  EXPECT_CONTAINS(invalid_argument_of([&] { DepthwiseConv2D("dw", o); }),
                  "`strides > 1` not supported in conjunction with `dilation_rate > 1`");
  o.strides = {1, 1};
  o.dilation_rate = {1, 1};
  DepthwiseConv2D dw("dw", o);
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    dw.compute_output_shape({2, 5, 3});
                  }),
                  "[depthwise_conv2d] layer \"dw\": kernel_size (3, 3) is larger than the input's spatial size (2, 5)");
  SeparableConv2D::Options s;
  s.kernel_size = {3, 3};
  EXPECT_CONTAINS(invalid_argument_of([&] { SeparableConv2D("sep", s); }),
                  "[separable_conv2d] layer \"sep\": Invalid value for argument `filters`");
  s.filters = 2;
  s.data_format = "channels_first";
  EXPECT_CONTAINS(invalid_argument_of([&] { SeparableConv2D("sep", s); }), "channels_first\" is not supported");
}

// ---- configs -------------------------------------------------------------------------------

TEST(ConvVariantsConfig, RoundTripThroughTheFactoryAndClonesComputeTheSame) {
  const std::vector<std::pair<std::string, std::string>> specs = {
      {"Conv2DTranspose",
       R"({"name": "a", "filters": 2, "kernel_size": 3, "strides": 2, "padding": "SAME", "output_padding": 1})"},
      {"Conv1DTranspose", R"({"name": "b", "filters": 2, "kernel_size": 3, "strides": 2, "output_padding": null})"},
      {"DepthwiseConv2D", R"({"name": "c", "kernel_size": 3, "depth_multiplier": 2, "padding": "same"})"},
      {"SeparableConv2D", R"({"name": "d", "filters": 3, "kernel_size": [3, 1], "depth_multiplier": 2,
                              "activation": "relu", "pointwise_regularizer": "l2"})"},
  };
  std::mt19937_64 rng(75);
  for (const auto& [cls, config] : specs) {
    SCOPED_TRACE(cls);
    Json spec = Json::object();
    spec.set("class_name", cls);
    spec.set("config", Json::parse(config));
    auto layer = layer_from_config(spec);
    ASSERT_EQ(layer->class_name(), cls);
    const bool sequence = cls == "Conv1DTranspose";
    const Shape in = sequence ? Shape{5, 2} : Shape{5, 4, 2};
    const Json written = layer_to_config(*layer);
    auto again = layer_from_config(written);
    EXPECT_EQ(layer_to_config(*again).dump(), written.dump());
    layer->build(in, 3, DType::Float64);
    auto copy = layer->clone();
    EXPECT_EQ(copy->class_name(), cls);
    EXPECT_EQ(copy->tensor_parallel_form(), Layer::TensorParallelForm::None);  // replicated only
    Shape xs{2};
    xs.insert(xs.end(), in.begin(), in.end());
    const Tensor x = random_tensor(xs, rng);
    const Tensor a = layer->forward(x, ForwardContext{}).clone();
    const Tensor b = copy->forward(x, ForwardContext{});
    ASSERT_EQ(a.numel(), b.numel());
    for (std::int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.data<double>()[i], b.data<double>()[i]);
  }
  Json t = Json::parse(R"({"name": "a", "filters": 2, "kernel_size": 3, "strides": 2, "output_padding": 1})");
  Json spec = Json::object();
  spec.set("class_name", "Conv2DTranspose");
  spec.set("config", t);
  const Json c = layer_from_config(spec)->config();
  EXPECT_EQ(c.at("output_padding").dump(), "[1,1]");
  EXPECT_EQ(c.at("kernel_size").dump(), "[3,3]");
  EXPECT_FALSE(c.contains("groups"));
}

}  // namespace
}  // namespace mdtrain
