// The convolutional layers: Conv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D and
// Reshape. Gradients against float64 central differences (input, kernel, bias) over every
// padding / stride / dilation / size / channel combination; forward values against a direct
// convolution written out here; Keras's output shapes and initializer fans; config round trips;
// clones; and the bad arguments and inputs, with their exception types and messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/nn/conv2d.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/global_average_pooling2d.h"
#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/nn/pooling2d.h"
#include "mdtrain/nn/reshape.h"
#include "mdtrain/core/threading/thread_team.h"
#include "mdtrain/ops/ops.h"
#include "gradient_check.h"

namespace mdtrain {
namespace {

// check_layer_gradients, random_tensor, dot, expect_close, numeric_gradient (eps 1e-6, rtol 1e-6,
// atol 1e-8): the float64 gradient check shared by the layer tests.
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

// ---- a direct convolution, the reference --------------------------------------------------------

// TF's "same" padding before the first element, computed here independently of conv_math.h.
std::int64_t same_pad(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d) {
  const std::int64_t out = (in + s - 1) / s;
  return std::max<std::int64_t>((out - 1) * s + (k - 1) * d + 1 - in, 0) / 2;
}

// Pre-activations of a Conv2D: z[b, oh, ow, f] = bias[f] + sum x[b, ih, iw, c] * kernel[i, j, c, f]
// over the in-bounds taps, by plain loops in double.
std::vector<double> direct_conv(Conv2D& conv, const Tensor& x) {
  const auto& o = conv.options();
  const std::int64_t B = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3), F = o.filters;
  const std::int64_t kh = o.kernel_size[0], kw = o.kernel_size[1], sh = o.strides[0], sw = o.strides[1],
                     dh = o.dilation_rate[0], dw = o.dilation_rate[1];
  const bool same = o.padding == "same";
  const std::int64_t OH = conv.output_shape()[0], OW = conv.output_shape()[1];
  const std::int64_t pt = same ? same_pad(H, kh, sh, dh) : 0, pl = same ? same_pad(W, kw, sw, dw) : 0;
  auto xv = [&](std::int64_t i) {
    return x.dtype() == DType::Float64 ? x.data<double>()[i] : double(x.data<float>()[i]);
  };
  const Tensor& K = conv.kernel().value;
  auto kv = [&](std::int64_t i) {
    return K.dtype() == DType::Float64 ? K.data<double>()[i] : double(K.data<float>()[i]);
  };
  std::vector<double> z(static_cast<std::size_t>(B * OH * OW * F));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t oh = 0; oh < OH; ++oh)
      for (std::int64_t ow = 0; ow < OW; ++ow)
        for (std::int64_t f = 0; f < F; ++f) {
          double s = 0;
          if (o.use_bias) {
            const Tensor& bias = conv.bias().value;
            s = bias.dtype() == DType::Float64 ? bias.data<double>()[f] : double(bias.data<float>()[f]);
          }
          for (std::int64_t i = 0; i < kh; ++i)
            for (std::int64_t j = 0; j < kw; ++j) {
              const std::int64_t ih = oh * sh - pt + i * dh, iw = ow * sw - pl + j * dw;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              for (std::int64_t c = 0; c < C; ++c)
                s += xv(((b * H + ih) * W + iw) * C + c) * kv(((i * kw + j) * C + c) * F + f);
            }
          z[static_cast<std::size_t>(((b * OH + oh) * OW + ow) * F + f)] = s;
        }
  return z;
}

// ---- Conv2D gradients ---------------------------------------------------------------------------

struct ConvCase {
  std::string padding;
  std::int64_t stride, dilation, h, w, channels, kh, kw;
  std::string activation;
};

// Every geometry; with each of linear, relu and tanh, or with linear only.
std::vector<ConvCase> conv_cases(bool every_activation) {
  std::vector<ConvCase> cases;
  for (const char* padding : {"valid", "same"})
    for (std::int64_t stride : {1, 2})
      for (std::int64_t dilation : {1, 2}) {
        if (stride > 1 && dilation > 1) continue;  // not allowed, as in Keras
        for (auto hw : {std::pair<std::int64_t, std::int64_t>{7, 7}, {6, 5}})
          for (std::int64_t channels : {1, 3})
            for (auto k : {std::pair<std::int64_t, std::int64_t>{3, 3}, {2, 3}})
              for (const char* activation : {"linear", "relu", "tanh"})
                if (every_activation || activation == std::string("linear"))
                  cases.push_back(
                      {padding, stride, dilation, hw.first, hw.second, channels, k.first, k.second, activation});
      }
  return cases;
}

// A built float64 Conv2D with random non-zero biases and an input whose pre-activations stay
// clear of ReLU's kink (a difference across it measures neither side's slope).
std::unique_ptr<Conv2D> make_conv(Conv2D::Options o, const Shape& image, std::int64_t batch, Tensor& x,
                                  std::mt19937_64& rng) {
  auto conv = std::make_unique<Conv2D>("conv2d", o);
  conv->build(image, 1234, DType::Float64);
  if (o.use_bias) {
    std::uniform_real_distribution<double> u(-0.5, 0.5);
    for (std::int64_t i = 0; i < conv->bias().value.numel(); ++i) conv->bias().value.data<double>()[i] = u(rng);
  }
  for (int attempt = 0;; ++attempt) {
    x = random_tensor({batch, image[0], image[1], image[2]}, rng);
    double closest = INFINITY;
    for (double v : direct_conv(*conv, x)) closest = std::min(closest, std::fabs(v));
    if (closest > 1e-3) break;
    if (attempt > 500) {
      ADD_FAILURE() << "could not draw an input away from the ReLU kink";
      break;
    }
  }
  return conv;
}

std::string conv_case_name(const ::testing::TestParamInfo<ConvCase>& info) {
  const auto& p = info.param;
  return p.padding + "_s" + std::to_string(p.stride) + "_d" + std::to_string(p.dilation) + "_" + std::to_string(p.h) +
         "x" + std::to_string(p.w) + "x" + std::to_string(p.channels) + "_k" + std::to_string(p.kh) +
         std::to_string(p.kw) + "_" + p.activation;
}

class Conv2DGradient : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2DGradient, MatchesFiniteDifferences) {
  const auto p = GetParam();
  std::mt19937_64 rng(7);
  Conv2D::Options o;
  o.filters = 4;
  o.kernel_size = {p.kh, p.kw};
  o.strides = {p.stride, p.stride};
  o.dilation_rate = {p.dilation, p.dilation};
  o.padding = p.padding;
  o.activation = p.activation;
  Tensor x;
  auto conv = make_conv(o, {p.h, p.w, p.channels}, 2, x, rng);
  check_layer_gradients(*conv, x, ForwardContext{}, 99);
}

INSTANTIATE_TEST_SUITE_P(AllGeometries, Conv2DGradient, ::testing::ValuesIn(conv_cases(true)), conv_case_name);

class Conv2DForward : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2DForward, MatchesDirectConvolution) {
  const auto p = GetParam();
  std::mt19937_64 rng(8);
  Conv2D::Options o;
  o.filters = 5;
  o.kernel_size = {p.kh, p.kw};
  o.strides = {p.stride, p.stride};
  o.dilation_rate = {p.dilation, p.dilation};
  o.padding = p.padding;
  o.bias_initializer = "random_uniform";
  for (DType dtype : {DType::Float64, DType::Float32}) {
    Conv2D conv("conv2d", o);
    conv.build({p.h, p.w, p.channels}, 5, dtype);
    Tensor x = random_tensor({3, p.h, p.w, p.channels}, rng, -1.0, 1.0, dtype);
    Tensor y = conv.forward(x, ForwardContext{});
    const auto want = direct_conv(conv, x);
    ASSERT_EQ(y.numel(), static_cast<std::int64_t>(want.size()));
    // float32: a dot product of kh*kw*cin <= 27 terms of magnitude <= ~0.6.
    const double tol = dtype == DType::Float64 ? 1e-13 : 1e-5;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double got = dtype == DType::Float64 ? y.data<double>()[i] : double(y.data<float>()[i]);
      ASSERT_NEAR(got, want[i], tol) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllGeometries, Conv2DForward, ::testing::ValuesIn(conv_cases(false)), conv_case_name);

class Conv2DActivationGradient : public ::testing::TestWithParam<const char*> {};

TEST_P(Conv2DActivationGradient, MatchesFiniteDifferences) {
  // Every activation, on a same-padded strided conv without bias.
  std::mt19937_64 rng(9);
  Conv2D::Options o;
  o.filters = 3;
  o.kernel_size = {3, 2};
  o.strides = {2, 1};
  o.padding = "same";
  o.activation = GetParam();
  o.use_bias = false;
  Tensor x;
  auto conv = make_conv(o, {5, 4, 2}, 2, x, rng);
  EXPECT_EQ(conv->parameters().size(), 1u);
  check_layer_gradients(*conv, x, ForwardContext{}, 100);
}

INSTANTIATE_TEST_SUITE_P(AllActivations, Conv2DActivationGradient,
                         ::testing::Values("linear", "relu", "sigmoid", "tanh", "softmax", "gelu"));

TEST(Conv2DGradientExtra, PointwiseKernelNeedsNoColumns) {
  std::mt19937_64 rng(10);
  for (const char* padding : {"valid", "same"}) {
    Conv2D::Options o;
    o.filters = 3;
    o.kernel_size = {1, 1};
    o.padding = padding;
    o.activation = "tanh";
    Tensor x;
    auto conv = make_conv(o, {3, 4, 5}, 2, x, rng);
    EXPECT_EQ(conv->output_shape(), (Shape{3, 4, 3}));
    check_layer_gradients(*conv, x, ForwardContext{}, 101);
    Tensor y = conv->forward(x, ForwardContext{});
    const auto want = direct_conv(*conv, x);
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y.data<double>()[i], std::tanh(want[i]), 1e-14);
  }
}

TEST(Conv2DGradientExtra, ChunkedColumnsGiveTheSameResults) {
  // A budget of one or three output rows' columns and outputs forces many GEMMs per batch (the
  // path of large batches and images), with chunks inside images and across image boundaries
  // (4 output rows per image); with columns rebuilt in backward (3 channels: kh*kw*cin = 27 > 4
  // filters) and with the whole batch's columns kept from forward (1 channel: 9 <= 12 filters).
  struct Case {
    std::int64_t channels, filters, rows_per_chunk;
  };
  for (const Case c : {Case{3, 4, 1}, Case{3, 4, 3}, Case{1, 12, 1}, Case{1, 12, 3}}) {
    SCOPED_TRACE(::testing::Message() << c.channels << " channels, " << c.rows_per_chunk << " rows per chunk");
    std::mt19937_64 rng(11);
    Conv2D::Options o;
    o.filters = c.filters;
    o.kernel_size = {3, 3};
    o.strides = {2, 2};
    o.padding = "same";
    o.activation = "relu";
    Tensor x;
    auto whole = make_conv(o, {7, 6, c.channels}, 5, x, rng);
    auto chunked_layer = whole->clone();
    auto& chunked = static_cast<Conv2D&>(*chunked_layer);
    // An output row: 3 positions x (9 * channels taps + 2 x filters) doubles.
    chunked.set_column_budget_bytes(c.rows_per_chunk * 3 * (9 * c.channels + 2 * c.filters) * 8);
    EXPECT_EQ(chunked.output_rows_per_chunk(), c.rows_per_chunk);
    EXPECT_GE(whole->output_rows_per_chunk(), 20);
    const Tensor G = random_tensor({5, 4, 3, c.filters}, rng);
    const Tensor y1 = whole->forward(x, ForwardContext{}).clone(), y2 = chunked.forward(x, ForwardContext{}).clone();
    const Tensor dx1 = whole->backward(G, true).clone(), dx2 = chunked.backward(G, true).clone();
    for (std::int64_t i = 0; i < y1.numel(); ++i) ASSERT_NEAR(y1.data<double>()[i], y2.data<double>()[i], 1e-14);
    for (std::int64_t i = 0; i < dx1.numel(); ++i) ASSERT_NEAR(dx1.data<double>()[i], dx2.data<double>()[i], 1e-14);
    for (std::int64_t i = 0; i < whole->kernel().grad.numel(); ++i)
      ASSERT_NEAR(whole->kernel().grad.data<double>()[i], chunked.kernel().grad.data<double>()[i], 1e-13);
    for (std::int64_t i = 0; i < whole->bias().grad.numel(); ++i)
      ASSERT_NEAR(whole->bias().grad.data<double>()[i], chunked.bias().grad.data<double>()[i], 1e-13);
    check_layer_gradients(chunked, x, ForwardContext{}, 102);
    // The first layer's backward (no input gradient) leaves kept columns intact for a repeat.
    chunked.forward(x, ForwardContext{});
    chunked.backward(G, false);
    const Tensor k1 = chunked.kernel().grad.clone();
    chunked.backward(G, false);
    for (std::int64_t i = 0; i < k1.numel(); ++i)
      ASSERT_EQ(chunked.kernel().grad.data<double>()[i], k1.data<double>()[i]);
  }
}

// On a CPU a batch big enough is split into runs of whole images over the intra-op threads (the
// intra-op thread count): the same outputs, input gradient and (summed in another order) kernel and
// bias gradients as one run, for kept and rebuilt columns, chunks inside and across images,
// uneven runs, and input rows no window reads.
TEST(Conv2DThreads, SplittingTheBatchOverThreadsGivesTheResultsOfOneRun) {
  struct Case {
    const char* name;
    std::int64_t h, w, channels, filters, kernel, stride, images;
    const char* padding;
    std::int64_t budget;  // 0: the default column budget
  };
  const Case cases[] = {// Each above the 2^21 multiply-adds a split needs; 7 images over 2 or 3 runs: uneven runs.
                        {"rebuilt columns, chunks across images", 16, 16, 8, 16, 3, 1, 8, "same", 0},
                        {"kept columns (first layer)", 28, 28, 1, 32, 3, 1, 12, "valid", 0},
                        {"one output row per chunk", 16, 16, 8, 16, 3, 1, 8, "same", 1},
                        {"uneven runs", 16, 16, 8, 20, 3, 1, 7, "same", 0},
                        {"rows no window reads", 30, 30, 16, 64, 2, 3, 6, "valid", 0},
                        {"pointwise", 12, 12, 32, 64, 1, 1, 8, "valid", 0}};
  const int threads_before = ops::cpu_thread_count();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::mt19937_64 rng(21);
    Conv2D::Options o;
    o.filters = c.filters;
    o.kernel_size = {c.kernel, c.kernel};
    o.strides = {c.stride, c.stride};
    o.padding = c.padding;
    o.activation = "relu";
    // Random inputs (no finite differences here, so no need to keep away from ReLU's kink).
    auto serial = std::make_unique<Conv2D>("conv2d", o);
    serial->build({c.h, c.w, c.channels}, 1234, DType::Float64);
    const Tensor x = random_tensor({c.images, c.h, c.w, c.channels}, rng);
    if (c.budget) serial->set_column_budget_bytes(c.budget);
    const Shape out = {c.images, serial->output_shape()[0], serial->output_shape()[1], c.filters};
    const Tensor g1 = random_tensor(out, rng), g2 = random_tensor(out, rng);
    ops::set_cpu_threads(1);
    const Tensor y = serial->forward(x, ForwardContext{}).clone();
    serial->backward(g1, true);
    const Tensor dx = serial->backward(g2, true).clone();  // the second pass reuses dx's buffer
    const Tensor dw = serial->kernel().grad.clone(), db = serial->bias().grad.clone();
    EXPECT_EQ(serial->last_runs(), 1);
    for (int threads : {2, 3}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads");
      auto split_layer = serial->clone();
      auto& split = static_cast<Conv2D&>(*split_layer);
      ops::set_cpu_threads(threads);
      const Tensor ys = split.forward(x, ForwardContext{}).clone();
      EXPECT_EQ(split.last_runs(), threads);
      split.backward(g1, true);
      const Tensor dxs = split.backward(g2, true).clone();
      EXPECT_EQ(split.last_runs(), threads);
      ops::set_cpu_threads(1);
      for (std::int64_t i = 0; i < y.numel(); ++i) ASSERT_NEAR(ys.data<double>()[i], y.data<double>()[i], 1e-13) << i;
      for (std::int64_t i = 0; i < dx.numel(); ++i)
        ASSERT_NEAR(dxs.data<double>()[i], dx.data<double>()[i], 1e-13) << i;
      for (std::int64_t i = 0; i < dw.numel(); ++i)
        ASSERT_NEAR(split.kernel().grad.data<double>()[i], dw.data<double>()[i], 1e-11) << i;
      for (std::int64_t i = 0; i < db.numel(); ++i)
        ASSERT_NEAR(split.bias().grad.data<double>()[i], db.data<double>()[i], 1e-11) << i;
    }
  }
  ops::set_cpu_threads(threads_before);
}

TEST(Conv2DThreads, SmallPassesAndReplicasRunningSideBySideDoNotSplit) {
  std::mt19937_64 rng(22);
  Conv2D::Options o;
  o.filters = 4;
  o.kernel_size = {3, 3};
  auto small = std::make_unique<Conv2D>("small", o);
  small->build({8, 8, 2}, 1, DType::Float64);
  Tensor x = random_tensor({4, 8, 8, 2}, rng);  // 4 * 36 * 18 * 4 multiply-adds: too few to split
  const int threads_before = ops::cpu_thread_count();
  ops::set_cpu_threads(2);
  small->forward(x, ForwardContext{});
  EXPECT_EQ(small->last_runs(), 1);
  ops::set_cpu_threads(threads_before);
  // A replica among several runs with one thread (cpu::ThreadTeam::run), so it never splits.
  o.filters = 64;
  auto big = std::make_unique<Conv2D>("big", o);
  big->build({28, 28, 8}, 1, DType::Float64);
  x = random_tensor({6, 28, 28, 8}, rng);
  cpu::ThreadTeam replicas(2);
  std::vector<int> runs(2, 0);
  ops::set_cpu_threads(2);
  replicas.run([&](int r) {
    auto mine = big->clone();
    mine->forward(x, ForwardContext{});
    runs[static_cast<std::size_t>(r)] = static_cast<Conv2D&>(*mine).last_runs();
  });
  EXPECT_EQ(runs, (std::vector<int>{1, 1}));
  ops::set_cpu_threads(threads_before);
}

// Pooling passes big enough are cut into runs of whole images over the intra-op threads: the same
// bits as one run (images are independent), overlapping windows and same padding included.
TEST(PoolingThreads, SplittingTheBatchGivesTheBitsOfOneRun) {
  const int threads_before = ops::cpu_thread_count();
  for (const bool average : {false, true}) {
    for (const std::int64_t stride : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << (average ? "average" : "max") << " pooling, stride " << stride);
      Pooling2D::Options o;
      o.pool_size = {3, 3};
      o.strides = {stride, stride};
      o.padding = "same";
      std::unique_ptr<Layer> pool;
      if (average) pool = std::make_unique<AveragePooling2D>("pool", o);
      else pool = std::make_unique<MaxPooling2D>("pool", o);
      pool->build({24, 20, 32}, 0, DType::Float64);
      std::mt19937_64 rng(5);
      const Tensor x = random_tensor({13, 24, 20, 32}, rng);  // 200k elements: above the 2^17 to split
      const Shape out{13, pool->output_shape()[0], pool->output_shape()[1], 32};
      const Tensor g = random_tensor(out, rng);
      std::vector<Tensor> ys, dxs;
      for (int threads : {1, 2, 3}) {
        ops::set_cpu_threads(threads);
        ys.push_back(pool->forward(x, ForwardContext{}).clone());
        dxs.push_back(pool->backward(g, true).clone());
      }
      ops::set_cpu_threads(threads_before);
      for (std::size_t t = 1; t < ys.size(); ++t) {
        EXPECT_EQ(std::memcmp(ys[t].raw(), ys[0].raw(), ys[0].nbytes()), 0) << t;
        EXPECT_EQ(std::memcmp(dxs[t].raw(), dxs[0].raw(), dxs[0].nbytes()), 0) << t;
      }
    }
  }
}

TEST(Conv2DGradientExtra, ChunkedInputGradientClearsRowsNoWindowReads) {
  // Valid padding with strides larger than the kernel leaves input rows no window reads; their
  // gradient is 0 even though dx's buffer held something else before (a reused buffer).
  std::mt19937_64 rng(15);
  Conv2D::Options o;
  o.filters = 2;
  o.kernel_size = {1, 2};
  o.strides = {3, 3};
  o.activation = "tanh";
  Tensor x;
  auto conv = make_conv(o, {8, 7, 2}, 3, x, rng);
  conv->set_column_budget_bytes(1);  // one output row per chunk
  EXPECT_EQ(conv->output_rows_per_chunk(), 1);
  const Tensor G = random_tensor({3, 3, 2, 2}, rng);
  conv->forward(x, ForwardContext{});
  Tensor dx = conv->backward(G, true);
  dx.fill(123.0);  // the buffer the next backward reuses
  conv->forward(x, ForwardContext{});
  dx = conv->backward(G, true);
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t h = 0; h < 8; ++h)
      for (std::int64_t w = 0; w < 7; ++w)
        for (std::int64_t c = 0; c < 2; ++c) {
          const double v = dx.data<double>()[((b * 8 + h) * 7 + w) * 2 + c];
          const bool read = h % 3 == 0 && h <= 6 && w % 3 != 2 && w <= 4;  // out 3x2, taps 1x2
          if (!read) ASSERT_EQ(v, 0.0) << b << "," << h << "," << w;
        }
  check_layer_gradients(*conv, x, ForwardContext{}, 108);
}

TEST(Conv2DGradientExtra, RegularizersAddTheirGradients) {
  std::mt19937_64 rng(12);
  Conv2D::Options o;
  o.filters = 2;
  o.kernel_size = {2, 2};
  o.activation = "tanh";
  o.kernel_regularizer = "l2";
  o.bias_regularizer = "l1";
  Tensor x;
  auto conv = make_conv(o, {4, 3, 2}, 2, x, rng);
  for (auto* p : conv->parameters())  // |w| has a kink at 0
    for (std::int64_t i = 0; i < p->value.numel(); ++i) {
      double& w = p->value.data<double>()[i];
      if (std::fabs(w) < 0.05) w = w < 0 ? -0.05 - std::fabs(w) : 0.05 + std::fabs(w);
    }
  EXPECT_GT(conv->regularization_loss(), 0.0);
  check_layer_gradients(*conv, x, ForwardContext{}, 103, /*with_regularization=*/true);
}

TEST(Conv2DGradientExtra, LogitsAndBackwardFromLogits) {
  // The Layer contract Dense implements: with softmax or sigmoid, logits() is the pre-activation
  // and backward_from_logits(dz) is backward through the affine part only.
  std::mt19937_64 rng(13);
  for (const char* activation : {"softmax", "sigmoid"}) {
    Conv2D::Options o;
    o.filters = 3;
    o.kernel_size = {2, 2};
    o.padding = "same";
    o.activation = activation;
    Tensor x;
    auto conv = make_conv(o, {4, 4, 2}, 2, x, rng);
    EXPECT_EQ(conv->output_activation(), parse_activation(activation));
    conv->forward(x, ForwardContext{});
    const Tensor z = conv->logits();
    ASSERT_EQ(z.shape(), (Shape{2, 4, 4, 3}));
    const auto want = direct_conv(*conv, x);
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(z.data<double>()[i], want[i], 1e-13);
    const Tensor G = random_tensor(z.shape(), rng);
    const Tensor dx = conv->backward_from_logits(G, true).clone();
    const Tensor dk = conv->kernel().grad.clone();
    auto loss = [&] {
      conv->forward(x, ForwardContext{});
      return dot(G, conv->logits());
    };
    expect_close(dx, numeric_gradient(x, loss), "dL/dx through logits");
    expect_close(dk, numeric_gradient(conv->kernel().value, loss), "dL/dkernel through logits");
  }
  Conv2D::Options linear;
  linear.filters = 1;
  linear.kernel_size = {1, 1};
  Conv2D plain("plain", linear);
  plain.build({2, 2, 1}, 0, DType::Float64);
  EXPECT_THROW(plain.logits(), std::logic_error);
}

TEST(Conv2DGradientExtra, BackwardOverwritesAndCanSkipTheInputGradient) {
  std::mt19937_64 rng(14);
  Conv2D::Options o;
  o.filters = 3;
  o.kernel_size = {3, 3};
  o.activation = "tanh";
  Tensor x;
  auto conv = make_conv(o, {6, 6, 2}, 3, x, rng);
  const Tensor G = random_tensor({3, 4, 4, 3}, rng);
  conv->forward(x, ForwardContext{});
  const Tensor dx = conv->backward(G, true).clone();
  const Tensor k1 = conv->kernel().grad.clone(), b1 = conv->bias().grad.clone();
  // A second backward of the same forward (its columns now spent on the input gradient) gives
  // the same gradients, not accumulated ones.
  const Tensor dx_again = conv->backward(G, true).clone();
  // And the first layer's backward skips the input gradient.
  conv->forward(x, ForwardContext{});
  EXPECT_FALSE(conv->backward(G, false).defined());
  for (std::int64_t i = 0; i < k1.numel(); ++i) ASSERT_EQ(conv->kernel().grad.data<double>()[i], k1.data<double>()[i]);
  for (std::int64_t i = 0; i < b1.numel(); ++i) ASSERT_EQ(conv->bias().grad.data<double>()[i], b1.data<double>()[i]);
  for (std::int64_t i = 0; i < dx.numel(); ++i) ASSERT_EQ(dx_again.data<double>()[i], dx.data<double>()[i]);
}

// ---- pooling, global pooling, reshape gradients -------------------------------------------------

struct PoolCase {
  std::int64_t pool_h, pool_w, stride_h, stride_w;
  std::string padding;
  std::int64_t h, w;
};

class PoolingGradient : public ::testing::TestWithParam<PoolCase> {};

// Distinct values 0.01 apart in random order: no two elements of a window are within a finite
// difference step of each other, so the max never switches while the check perturbs it.
Tensor distinct_values(const Shape& shape, std::mt19937_64& rng) {
  Tensor t(shape, DType::Float64);
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01 * static_cast<double>(i) - 0.3;
  std::shuffle(v.begin(), v.end(), rng);
  std::copy(v.begin(), v.end(), t.data<double>());
  return t;
}

TEST_P(PoolingGradient, MaxMatchesFiniteDifferences) {
  const auto p = GetParam();
  std::mt19937_64 rng(20);
  Pooling2D::Options o;
  o.pool_size = {p.pool_h, p.pool_w};
  o.strides = {p.stride_h, p.stride_w};
  o.padding = p.padding;
  MaxPooling2D pool("max_pooling2d", o);
  pool.build({p.h, p.w, 3}, 0, DType::Float64);
  EXPECT_TRUE(pool.parameters().empty());
  check_layer_gradients(pool, distinct_values({2, p.h, p.w, 3}, rng), ForwardContext{}, 104);
}

TEST_P(PoolingGradient, AverageMatchesFiniteDifferences) {
  const auto p = GetParam();
  std::mt19937_64 rng(21);
  Pooling2D::Options o;
  o.pool_size = {p.pool_h, p.pool_w};
  o.strides = {p.stride_h, p.stride_w};
  o.padding = p.padding;
  AveragePooling2D pool("average_pooling2d", o);
  pool.build({p.h, p.w, 3}, 0, DType::Float64);
  check_layer_gradients(pool, random_tensor({2, p.h, p.w, 3}, rng), ForwardContext{}, 105);
}

INSTANTIATE_TEST_SUITE_P(Geometries, PoolingGradient,
                         ::testing::Values(PoolCase{2, 2, 2, 2, "valid", 6, 6}, PoolCase{2, 2, 2, 2, "valid", 7, 5},
                                           PoolCase{2, 2, 2, 2, "same", 7, 5}, PoolCase{3, 3, 2, 2, "valid", 7, 6},
                                           PoolCase{3, 3, 2, 2, "same", 7, 6}, PoolCase{2, 2, 1, 1, "valid", 5, 4},
                                           PoolCase{2, 2, 1, 1, "same", 5, 4}, PoolCase{2, 3, 3, 2, "same", 7, 7},
                                           PoolCase{3, 2, 1, 3, "valid", 6, 8}));

TEST(GlobalAveragePooling2DGradient, MatchesFiniteDifferences) {
  std::mt19937_64 rng(22);
  for (bool keepdims : {false, true}) {
    GlobalAveragePooling2D gap("global_average_pooling2d", keepdims);
    gap.build({5, 4, 3}, 0, DType::Float64);
    EXPECT_EQ(gap.output_shape(), keepdims ? (Shape{1, 1, 3}) : (Shape{3}));
    check_layer_gradients(gap, random_tensor({2, 5, 4, 3}, rng), ForwardContext{}, 106);
  }
}

TEST(ReshapeGradient, MatchesFiniteDifferences) {
  std::mt19937_64 rng(23);
  Reshape reshape("reshape", {-1, 4});
  reshape.build({3, 4, 2}, 0, DType::Float64);
  EXPECT_EQ(reshape.output_shape(), (Shape{6, 4}));
  check_layer_gradients(reshape, random_tensor({2, 3, 4, 2}, rng), ForwardContext{}, 107);
}

TEST(ConvStackGradient, MatchesFiniteDifferencesThroughEveryLayer) {
  // A small CNN as a user writes it: conv → max pool → conv → global average → dense, every
  // parameter's gradient through LayerStack against finite differences of the whole stack.
  std::mt19937_64 rng(24);
  LayerStack stack;
  Conv2D::Options c1;
  c1.filters = 3;
  c1.kernel_size = {3, 3};
  c1.activation = "tanh";
  c1.bias_initializer = "random_uniform";
  stack.add(std::make_shared<Conv2D>("conv2d", c1));
  Pooling2D::Options pool;
  stack.add(std::make_shared<MaxPooling2D>("max_pooling2d", pool));
  Conv2D::Options c2;
  c2.filters = 4;
  c2.kernel_size = {2, 2};
  c2.padding = "same";
  c2.activation = "sigmoid";
  stack.add(std::make_shared<Conv2D>("conv2d_1", c2));
  stack.add(std::make_shared<GlobalAveragePooling2D>("gap"));
  Dense::Options d;
  d.units = 3;
  stack.add(std::make_shared<Dense>("dense", d));
  stack.build({8, 7, 1}, 42, DType::Float64);
  EXPECT_EQ(stack.output_shape(), Shape{3});
  Tensor x = random_tensor({2, 8, 7, 1}, rng);
  const ForwardContext ctx;
  Tensor y = stack.forward(x, ctx);
  const Tensor G = random_tensor(y.shape(), rng);
  stack.backward(G);
  const Tensor grads = stack.packed_grads().clone();
  auto loss = [&] { return dot(G, stack.forward(x, ctx)); };
  expect_close(grads, numeric_gradient(stack.packed_values(), loss), "packed gradients");
}

// ---- shapes, initialisation, configs, clones ----------------------------------------------------

Conv2D::Options conv_options(std::int64_t filters, std::vector<std::int64_t> k, std::vector<std::int64_t> s = {1, 1},
                             std::string padding = "valid", std::vector<std::int64_t> d = {1, 1}) {
  Conv2D::Options o;
  o.filters = filters;
  o.kernel_size = std::move(k);
  o.strides = std::move(s);
  o.padding = std::move(padding);
  o.dilation_rate = std::move(d);
  return o;
}

Pooling2D::Options pool_options(std::vector<std::int64_t> size, std::vector<std::int64_t> strides = {},
                                std::string padding = "valid") {
  Pooling2D::Options o;
  o.pool_size = std::move(size);
  o.strides = std::move(strides);
  o.padding = std::move(padding);
  return o;
}

TEST(ConvShapes, MatchKeras) {
  // Output shapes as Keras computes them (keras.layers.X(...).compute_output_shape).
  struct Case {
    std::shared_ptr<Layer> layer;
    Shape in, out;
  };
  const std::vector<Case> cases = {
      {std::make_shared<Conv2D>("c", conv_options(32, {3, 3})), {28, 28, 1}, {26, 26, 32}},
      {std::make_shared<Conv2D>("c", conv_options(32, {3, 3}, {1, 1}, "same")), {28, 28, 1}, {28, 28, 32}},
      {std::make_shared<Conv2D>("c", conv_options(8, {3, 3}, {2, 2}, "same")), {28, 28, 1}, {14, 14, 8}},
      {std::make_shared<Conv2D>("c", conv_options(8, {5, 5}, {2, 2})), {28, 28, 3}, {12, 12, 8}},
      {std::make_shared<Conv2D>("c", conv_options(8, {3, 3}, {1, 1}, "valid", {2, 2})), {28, 28, 3}, {24, 24, 8}},
      {std::make_shared<Conv2D>("c", conv_options(8, {3, 3}, {1, 1}, "same", {2, 3})), {9, 10, 3}, {9, 10, 8}},
      {std::make_shared<Conv2D>("c", conv_options(8, {2, 4}, {3, 2})), {11, 10, 3}, {4, 4, 8}},
      {std::make_shared<Conv2D>("c", conv_options(8, {3, 3}, {3, 3}, "same")), {10, 11, 3}, {4, 4, 8}},
      {std::make_shared<MaxPooling2D>("p", pool_options({2, 2})), {26, 26, 32}, {13, 13, 32}},
      {std::make_shared<MaxPooling2D>("p", pool_options({2, 2})), {7, 7, 2}, {3, 3, 2}},
      {std::make_shared<MaxPooling2D>("p", pool_options({2, 2}, {}, "same")), {7, 7, 2}, {4, 4, 2}},
      {std::make_shared<MaxPooling2D>("p", pool_options({3, 3}, {2, 2})), {13, 13, 4}, {6, 6, 4}},
      {std::make_shared<AveragePooling2D>("p", pool_options({3, 3}, {2, 2}, "same")), {13, 13, 4}, {7, 7, 4}},
      {std::make_shared<AveragePooling2D>("p", pool_options({2, 3}, {1, 1})), {5, 5, 1}, {4, 3, 1}},
      {std::make_shared<GlobalAveragePooling2D>("g"), {7, 5, 6}, {6}},
      {std::make_shared<GlobalAveragePooling2D>("g", true), {7, 5, 6}, {1, 1, 6}},
      {std::make_shared<Reshape>("r", Shape{-1, 4}), {4, 4, 1}, {4, 4}},
      {std::make_shared<Reshape>("r", Shape{16}), {4, 4, 1}, {16}},
      {std::make_shared<Reshape>("r", Shape{2, -1, 2}), {4, 4, 1}, {2, 4, 2}},
  };
  for (const auto& c : cases) EXPECT_EQ(c.layer->compute_output_shape(c.in), c.out) << c.layer->class_name();
}

TEST(ConvInitialization, GlorotUsesKerasConvolutionFans) {
  // Keras: fan_in = kh*kw*cin, fan_out = kh*kw*filters; glorot_uniform's limit sqrt(6/(in+out)).
  Conv2D conv("conv2d", conv_options(16, {3, 3}));
  conv.build({10, 10, 8}, 3, DType::Float64);
  const Tensor& k = conv.kernel().value;
  ASSERT_EQ(k.shape(), (Shape{3, 3, 8, 16}));
  const double limit = std::sqrt(6.0 / (72.0 + 144.0));
  double max_abs = 0, sum_sq = 0;
  for (std::int64_t i = 0; i < k.numel(); ++i) {
    max_abs = std::max(max_abs, std::fabs(k.data<double>()[i]));
    sum_sq += k.data<double>()[i] * k.data<double>()[i];
  }
  EXPECT_LE(max_abs, limit);
  EXPECT_GT(max_abs, 0.95 * limit);
  // The variance of U(-l, l) is l^2/3; 1152 draws put the estimate within ~6% (one sigma 4%).
  EXPECT_NEAR(sum_sq / static_cast<double>(k.numel()), limit * limit / 3, 0.15 * limit * limit / 3);
  for (std::int64_t i = 0; i < conv.bias().value.numel(); ++i) EXPECT_EQ(conv.bias().value.data<double>()[i], 0.0);
  // Different layers (seeds) draw different kernels; the same seed the same.
  Conv2D again("conv2d", conv_options(16, {3, 3}));
  again.build({10, 10, 8}, 3, DType::Float64);
  EXPECT_EQ(std::memcmp(again.kernel().value.raw(), k.raw(), k.nbytes()), 0);
}

std::vector<std::shared_ptr<Layer>> every_layer_kind() {
  Conv2D::Options o = conv_options(6, {3, 2}, {2, 1}, "same");
  o.activation = "relu";
  o.use_bias = false;
  o.kernel_initializer = "he_normal";
  o.kernel_regularizer = "l2";
  Conv2D::Options dilated = conv_options(2, {2, 2}, {1, 1}, "valid", {2, 1});
  dilated.bias_initializer = "ones";
  dilated.bias_regularizer = "l1";
  return {std::make_shared<Conv2D>("conv2d", o),
          std::make_shared<Conv2D>("conv2d_1", dilated),
          std::make_shared<MaxPooling2D>("max_pooling2d", pool_options({3, 2}, {1, 2}, "same")),
          std::make_shared<AveragePooling2D>("average_pooling2d", pool_options({2, 2})),
          std::make_shared<GlobalAveragePooling2D>("global_average_pooling2d", true),
          std::make_shared<Reshape>("reshape", Shape{-1, 3})};
}

TEST(ConvConfig, RoundTripsThroughTheLayerFactory) {
  for (const auto& layer : every_layer_kind()) {
    layer->build({6, 6, 3}, 1, DType::Float32);
    const Json spec = layer_to_config(*layer);
    auto copy = layer_from_config(Json::parse(spec.dump()));
    EXPECT_EQ(copy->class_name(), layer->class_name());
    EXPECT_EQ(copy->name(), layer->name());
    EXPECT_EQ(layer_to_config(*copy), spec) << spec.dump();
    copy->build({6, 6, 3}, 1, DType::Float32);
    EXPECT_EQ(copy->output_shape(), layer->output_shape()) << layer->class_name();
    ASSERT_EQ(copy->parameters().size(), layer->parameters().size());
    for (std::size_t i = 0; i < copy->parameters().size(); ++i)
      EXPECT_EQ(copy->parameters()[i]->value.shape(), layer->parameters()[i]->value.shape());
  }
}

TEST(ConvConfig, HasKerasFields) {
  Conv2D conv("conv2d", conv_options(4, {3, 3}, {2, 2}, "SAME"));
  const Json c = conv.config();
  EXPECT_EQ(c.at("filters").as_int(), 4);
  EXPECT_EQ(c.at("kernel_size").dump(), "[3,3]");
  EXPECT_EQ(c.at("strides").dump(), "[2,2]");
  EXPECT_EQ(c.at("padding").as_string(), "same");  // lowercased, as Keras stores it
  EXPECT_EQ(c.at("data_format").as_string(), "channels_last");
  EXPECT_EQ(c.at("dilation_rate").dump(), "[1,1]");
  EXPECT_EQ(c.at("activation").as_string(), "linear");
  EXPECT_EQ(c.at("kernel_initializer").at("class_name").as_string(), "GlorotUniform");
  MaxPooling2D pool("max_pooling2d", pool_options({3, 3}));
  EXPECT_EQ(pool.config().at("strides").dump(), "[3,3]");  // strides=None means pool_size
  // A Keras config may give integers where we write pairs, and may omit defaults.
  auto loaded = layer_from_config(Json::parse(
      R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3, "strides": 2, "padding": "same"}})"));
  auto& lc = static_cast<Conv2D&>(*loaded);
  EXPECT_EQ(lc.options().kernel_size, (std::vector<std::int64_t>{3, 3}));
  EXPECT_EQ(lc.options().strides, (std::vector<std::int64_t>{2, 2}));
  EXPECT_CONTAINS(invalid_argument_of([] {
                    layer_from_config(Json::parse(R"({"class_name": "Conv2D", "config": {"name": "g", "filters": 2,
                        "kernel_size": 3, "groups": 2}})"));
                  }),
                  "groups");
  EXPECT_CONTAINS(invalid_argument_of(
                      [] { layer_from_config(Json::parse(R"({"class_name": "Conv3D", "config": {"name": "x"}})")); }),
                  "known: Dense, Activation, Flatten, Dropout, Conv2D, MaxPooling2D, AveragePooling2D");
}

TEST(ConvClone, IsIndependentAndEqual) {
  std::mt19937_64 rng(30);
  for (const auto& layer : every_layer_kind()) {
    layer->build({6, 6, 3}, 1, DType::Float64);
    auto copy = layer->clone();
    EXPECT_EQ(copy->config(), layer->config());
    Tensor x = random_tensor({2, 6, 6, 3}, rng);
    const Tensor y = layer->forward(x, ForwardContext{}).clone();
    const Tensor yc = copy->forward(x, ForwardContext{}).clone();
    ASSERT_EQ(std::memcmp(y.raw(), yc.raw(), y.nbytes()), 0) << layer->class_name();
    if (layer->parameters().empty()) continue;
    // Changing the original's weights leaves the copy's output alone.
    for (auto* p : layer->parameters()) p->value.fill(0.5);
    const Tensor yc2 = copy->forward(x, ForwardContext{});
    EXPECT_EQ(std::memcmp(yc.raw(), yc2.raw(), yc.nbytes()), 0) << layer->class_name();
    EXPECT_NE(std::memcmp(layer->forward(x, ForwardContext{}).raw(), yc.raw(), yc.nbytes()), 0);
    EXPECT_FALSE(layer->parameters()[0]->value.same_storage(copy->parameters()[0]->value));
  }
}

// ---- bad arguments and inputs -------------------------------------------------------------------

TEST(ConvErrors, KernelLargerThanTheInput) {
  Conv2D conv("conv2d", conv_options(3, {5, 5}));
  const std::string m = invalid_argument_of([&] { conv.build({4, 4, 1}, 0); });
  EXPECT_CONTAINS(m, "[conv2d] layer \"conv2d\"");
  EXPECT_CONTAINS(m, "kernel_size (5, 5)");
  EXPECT_CONTAINS(m, "Received input shape (None, 4, 4, 1)");
  EXPECT_FALSE(conv.built());
  // The same kernel fits with "same" padding; a dilated one may not fit although its size does.
  Conv2D same("conv2d_same", conv_options(3, {5, 5}, {1, 1}, "same"));
  same.build({4, 4, 1}, 0);
  EXPECT_EQ(same.output_shape(), (Shape{4, 4, 3}));
  Conv2D dilated("conv2d_dilated", conv_options(3, {3, 3}, {1, 1}, "valid", {3, 3}));
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    dilated.build({6, 8, 2}, 0);
                  }),
                  "dilated by dilation_rate (3, 3) to (7, 7)");
}

TEST(ConvErrors, InputThatIsNotAnImage) {
  Conv2D conv("conv2d", conv_options(3, {3, 3}));
  EXPECT_CONTAINS(
      invalid_argument_of([&] {
        conv.build({28, 28}, 0);
      }),
      "Input 0 of layer \"conv2d\" is incompatible with the layer: expected ndim=4, found ndim=3. Full shape "
      "received: (None, 28, 28)");
  conv.build({8, 8, 3}, 0);
  Tensor flat({2, 8, 8});
  EXPECT_CONTAINS(invalid_argument_of([&] { conv.forward(flat, ForwardContext{}); }),
                  "expected ndim=4, found ndim=3. Full shape received: (2, 8, 8)");
  MaxPooling2D pool("max_pooling2d", pool_options({2, 2}));
  EXPECT_CONTAINS(invalid_argument_of([&] { pool.build({10}, 0); }),
                  "Input 0 of layer \"max_pooling2d\" is incompatible with the layer: expected ndim=4, found ndim=2");
  GlobalAveragePooling2D gap("global_average_pooling2d");
  EXPECT_CONTAINS(invalid_argument_of([&] { gap.build({4, 4, 2, 1}, 0); }), "expected ndim=4, found ndim=5");
}

TEST(ConvErrors, ChannelMismatchOnABuiltLayer) {
  Conv2D conv("conv2d", conv_options(3, {3, 3}));
  conv.build({8, 8, 3}, 0);
  Tensor one_channel({2, 8, 8, 1});
  EXPECT_CONTAINS(invalid_argument_of([&] { conv.forward(one_channel, ForwardContext{}); }),
                  "Input 0 of layer \"conv2d\" is incompatible with the layer: expected axis -1 of input shape to have "
                  "value 3, but received input with shape (2, 8, 8, 1)");
  Tensor other_size({2, 9, 8, 3});
  EXPECT_CONTAINS(invalid_argument_of([&] { conv.forward(other_size, ForwardContext{}); }),
                  "expected shape (None, 8, 8, 3), but received input with shape (2, 9, 8, 3)");
  Tensor doubles({2, 8, 8, 3}, DType::Float64);
  EXPECT_CONTAINS(invalid_argument_of([&] { conv.forward(doubles, ForwardContext{}); }), "expects float32 input");
}

TEST(ConvErrors, PoolLargerThanTheInput) {
  MaxPooling2D pool("max_pooling2d", pool_options({3, 3}));
  const std::string m = invalid_argument_of([&] { pool.build({2, 2, 1}, 0); });
  EXPECT_CONTAINS(m, "[max_pooling2d] layer \"max_pooling2d\": pool_size (3, 3)");
  EXPECT_CONTAINS(m, "Received input shape (None, 2, 2, 1)");
  AveragePooling2D avg("average_pooling2d", pool_options({1, 4}));
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    avg.build({5, 3, 2}, 0);
                  }),
                  "[average_pooling2d] layer \"average_pooling2d\"");
  MaxPooling2D same("max_pooling2d_same", pool_options({3, 3}, {}, "same"));
  same.build({2, 2, 1}, 0);
  EXPECT_EQ(same.output_shape(), (Shape{1, 1, 1}));
}

TEST(ConvErrors, BadArgumentsNameTheArgument) {
  auto conv_message = [](Conv2D::Options o) { return invalid_argument_of([&] { Conv2D("conv2d", std::move(o)); }); };
  EXPECT_CONTAINS(conv_message(conv_options(0, {3, 3})),
                  "layer \"conv2d\": Invalid value for argument `filters`. Expected a strictly positive value. "
                  "Received filters=0");
  EXPECT_CONTAINS(conv_message(conv_options(-2, {3, 3})), "Received filters=-2");
  EXPECT_CONTAINS(conv_message(conv_options(2, {3, 3, 3})),
                  "The `kernel_size` argument must be a tuple of 2 integers. Received kernel_size=(3, 3, 3)");
  EXPECT_CONTAINS(conv_message(conv_options(2, {3})), "Received kernel_size=(3,)");
  EXPECT_CONTAINS(conv_message(conv_options(2, {0, 3})),
                  "Received kernel_size=(0, 3), including values {0} that do not satisfy `value > 0`");
  EXPECT_CONTAINS(conv_message(conv_options(2, {3, 3}, {-1, 1})), "Received strides=(-1, 1), including values {-1}");
  EXPECT_CONTAINS(conv_message(conv_options(2, {3, 3}, {1, 1, 1})), "The `strides` argument must be a tuple of 2");
  EXPECT_CONTAINS(conv_message(conv_options(2, {3, 3}, {1, 1}, "valid", {0, 1})), "Received dilation_rate=(0, 1)");
  EXPECT_CONTAINS(conv_message(conv_options(2, {3, 3}, {2, 1}, "valid", {1, 2})),
                  "`strides > 1` not supported in conjunction with `dilation_rate > 1`. Received: strides=(2, 1) and "
                  "dilation_rate=(1, 2)");
  EXPECT_CONTAINS(conv_message(conv_options(2, {3, 3}, {1, 1}, "full")),
                  "The `padding` argument must be one of \"valid\", \"same\". Received: padding=full");
  Conv2D::Options cf = conv_options(2, {3, 3});
  cf.data_format = "channels_first";
  EXPECT_CONTAINS(conv_message(cf), "layer \"conv2d\": data_format=\"channels_first\" is not supported");
  Conv2D::Options act = conv_options(2, {3, 3});
  act.activation = "swishy";
  EXPECT_CONTAINS(conv_message(act), "unknown activation 'swishy'");
  Conv2D::Options init = conv_options(2, {3, 3});
  init.kernel_initializer = "glorot";
  EXPECT_CONTAINS(conv_message(init), "unknown initializer 'glorot'");

  auto pool_message = [](Pooling2D::Options o) {
    return invalid_argument_of([&] { MaxPooling2D("max_pooling2d", std::move(o)); });
  };
  EXPECT_CONTAINS(pool_message(pool_options({2})),
                  "layer \"max_pooling2d\": The `pool_size` argument must be a tuple of 2");
  EXPECT_CONTAINS(pool_message(pool_options({2, 2}, {0, 2})), "Received strides=(0, 2), including values {0}");
  EXPECT_CONTAINS(pool_message(pool_options({2, 2}, {}, "causal")), "Received: padding=causal");
  EXPECT_CONTAINS(invalid_argument_of([] { GlobalAveragePooling2D("gap", false, "channels_first"); }),
                  "channels_first");
}

TEST(ConvErrors, ReshapeSizes) {
  Reshape r("reshape", {3, 5});
  EXPECT_CONTAINS(invalid_argument_of([&] {
                    r.build({4, 4, 1}, 0);
                  }),
                  "[reshape] layer \"reshape\": The total size of the tensor must be unchanged. Received: "
                  "input_shape=(4, 4, 1), target_shape=(3, 5)");
  Reshape r2("reshape_1", {-1, 3});
  EXPECT_CONTAINS(invalid_argument_of([&] { r2.build({4, 4, 1}, 0); }), "cannot be divided");
  EXPECT_CONTAINS(invalid_argument_of([] {
                    Reshape("reshape_2", {-1, -1});
                  }),
                  "There must be at most one unknown dimension (-1) in target_shape. Received: target_shape=(-1, -1)");
  EXPECT_CONTAINS(invalid_argument_of([] { Reshape("reshape_3", {4, 0}); }), "target_shape=(4, 0)");
}

}  // namespace
}  // namespace mdtrain
