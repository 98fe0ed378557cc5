// Gradient checks for every layer: in float64, backward()'s parameter and input gradients against
// central finite differences of L = sum(G * forward(x)) (+ the regularization loss where a layer
// has regularizers), for a random input x and a random upstream gradient G.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/layer_stack.h"
#include "gradient_check.h"

namespace mdtrain {
namespace {

// check_layer_gradients, random_tensor, dot, expect_close, numeric_gradient (eps 1e-6, rtol 1e-6,
// atol 1e-8): the float64 gradient check shared by the layer tests.
using namespace testing;

// Pre-activations of a Dense layer, computed here by a plain loop.
std::vector<double> dense_preactivations(Dense& d, const Tensor& x) {
  const std::int64_t in = d.kernel().value.dim(0), units = d.kernel().value.dim(1), rows = x.numel() / in;
  std::vector<double> z(static_cast<std::size_t>(rows * units));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t u = 0; u < units; ++u) {
      double s = d.bias().value.defined() ? d.bias().value.data<double>()[u] : 0.0;
      for (std::int64_t i = 0; i < in; ++i)
        s += x.data<double>()[r * in + i] * d.kernel().value.data<double>()[i * units + u];
      z[static_cast<std::size_t>(r * units + u)] = s;
    }
  return z;
}

// A Dense layer with random (not zero) biases and an input whose pre-activations stay clear of
// ReLU's kink at 0 (a finite difference across the kink measures neither side's slope).
std::unique_ptr<Dense> make_dense(Dense::Options o, const Shape& input_shape, std::int64_t batch, Tensor& x,
                                  std::mt19937_64& rng) {
  auto d = std::make_unique<Dense>("dense", o);
  d->build(input_shape, 1234, DType::Float64);
  if (o.use_bias) {
    std::uniform_real_distribution<double> u(-0.5, 0.5);
    for (std::int64_t i = 0; i < d->bias().value.numel(); ++i) d->bias().value.data<double>()[i] = u(rng);
  }
  Shape xs{batch};
  xs.insert(xs.end(), input_shape.begin(), input_shape.end());
  for (int attempt = 0;; ++attempt) {
    x = random_tensor(xs, rng);
    auto z = dense_preactivations(*d, x);
    double closest = INFINITY;
    for (double v : z) closest = std::min(closest, std::fabs(v));
    if (closest > 1e-2) break;
    if (attempt > 200) {
      ADD_FAILURE() << "could not draw an input away from the ReLU kink";
      break;
    }
  }
  return d;
}

struct DenseCase {
  const char* activation;
  bool use_bias;
};

class DenseGradient : public ::testing::TestWithParam<DenseCase> {};

TEST_P(DenseGradient, MatchesFiniteDifferences) {
  const auto p = GetParam();
  std::mt19937_64 rng(7);
  Dense::Options o;
  o.units = 5;
  o.activation = p.activation;
  o.use_bias = p.use_bias;
  Tensor x;
  auto d = make_dense(o, {4}, 3, x, rng);
  EXPECT_EQ(d->parameters().size(), p.use_bias ? 2u : 1u);
  check_layer_gradients(*d, x, ForwardContext{}, 99);
}

TEST_P(DenseGradient, MatchesFiniteDifferencesOnRank3Input) {
  // Dense acts on the last axis: (batch, 2, 4) -> (batch, 2, 5).
  const auto p = GetParam();
  std::mt19937_64 rng(8);
  Dense::Options o;
  o.units = 5;
  o.activation = p.activation;
  o.use_bias = p.use_bias;
  Tensor x;
  auto d = make_dense(o, {2, 4}, 2, x, rng);
  check_layer_gradients(*d, x, ForwardContext{true, 3, 0}, 100);
}

std::string dense_case_name(const ::testing::TestParamInfo<DenseCase>& info) {
  return std::string(info.param.activation) + (info.param.use_bias ? "_bias" : "_nobias");
}

INSTANTIATE_TEST_SUITE_P(
    AllActivations, DenseGradient,
    ::testing::Values(DenseCase{"linear", true}, DenseCase{"linear", false}, DenseCase{"relu", true},
                      DenseCase{"relu", false}, DenseCase{"sigmoid", true}, DenseCase{"sigmoid", false},
                      DenseCase{"tanh", true}, DenseCase{"tanh", false}, DenseCase{"softmax", true},
                      DenseCase{"softmax", false}, DenseCase{"gelu", true}, DenseCase{"gelu", false},
                      // the smooth ones of Keras's other activations
                      DenseCase{"elu", true}, DenseCase{"selu", true}, DenseCase{"softplus", true},
                      DenseCase{"softsign", true}, DenseCase{"silu", true}, DenseCase{"mish", false},
                      DenseCase{"exponential", true}, DenseCase{"log_sigmoid", true}),
    dense_case_name);

struct RegularizerCase {
  const char* name;
  Json kernel, bias;
};

class DenseRegularizedGradient : public ::testing::TestWithParam<int> {};

TEST_P(DenseRegularizedGradient, MatchesFiniteDifferencesIncludingPenalty) {
  Json l1l2 = Json::object();
  l1l2.set("class_name", "L1L2");
  Json cfg = Json::object();
  cfg.set("l1", 0.03);
  cfg.set("l2", 0.07);
  l1l2.set("config", cfg);
  const std::vector<RegularizerCase> cases = {
      {"l1_kernel", "l1", Json()},
      {"l2_kernel", "l2", Json()},
      {"l2_bias", Json(), "l2"},
      {"l1l2_both", l1l2, "l1"},
  };
  const auto& c = cases[static_cast<std::size_t>(GetParam())];
  SCOPED_TRACE(c.name);
  std::mt19937_64 rng(9);
  Dense::Options o;
  o.units = 4;
  o.activation = "tanh";
  o.kernel_regularizer = c.kernel;
  o.bias_regularizer = c.bias;
  Tensor x;
  auto d = make_dense(o, {3}, 4, x, rng);
  // |w| is not differentiable at 0: keep every weight at least 0.05 from it.
  for (auto* p : d->parameters())
    for (std::int64_t i = 0; i < p->value.numel(); ++i) {
      double& w = p->value.data<double>()[i];
      if (std::fabs(w) < 0.05) w = w < 0 ? -0.05 - std::fabs(w) : 0.05 + std::fabs(w);
    }
  EXPECT_GT(d->regularization_loss(), 0.0);
  check_layer_gradients(*d, x, ForwardContext{}, 101, /*with_regularization=*/true);
}

INSTANTIATE_TEST_SUITE_P(Regularizers, DenseRegularizedGradient, ::testing::Range(0, 4));

TEST(DenseGradient, BackwardOverwritesGradientsAndCanSkipInputGradient) {
  std::mt19937_64 rng(10);
  Dense::Options o;
  o.units = 3;
  o.activation = "sigmoid";
  Tensor x;
  auto d = make_dense(o, {4}, 5, x, rng);
  const Tensor G = random_tensor({5, 3}, rng);
  d->forward(x, ForwardContext{});
  Tensor dx = d->backward(G, true).clone();
  const Tensor k1 = d->kernel().grad.clone(), b1 = d->bias().grad.clone();
  // A second backward of the same forward gives the same gradients: they are not accumulated.
  d->forward(x, ForwardContext{});
  Tensor none = d->backward(G, false);
  EXPECT_FALSE(none.defined());
  for (std::int64_t i = 0; i < k1.numel(); ++i) EXPECT_EQ(d->kernel().grad.data<double>()[i], k1.data<double>()[i]);
  for (std::int64_t i = 0; i < b1.numel(); ++i) EXPECT_EQ(d->bias().grad.data<double>()[i], b1.data<double>()[i]);
}

class ActivationLayerGradient : public ::testing::TestWithParam<const char*> {};

TEST_P(ActivationLayerGradient, MatchesFiniteDifferences) {
  std::mt19937_64 rng(11);
  ActivationLayer layer("act", GetParam());
  layer.build({2, 5}, 0, DType::Float64);
  Tensor x = random_tensor({3, 2, 5}, rng, -2.0, 2.0);
  // Clear of ReLU's kink.
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    double& v = x.data<double>()[i];
    v += v >= 0 ? 0.05 : -0.05;
  }
  EXPECT_TRUE(layer.parameters().empty());
  check_layer_gradients(layer, x, ForwardContext{}, 102);
}

INSTANTIATE_TEST_SUITE_P(AllActivations, ActivationLayerGradient,
                         ::testing::Values("linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "elu", "selu",
                                           "softplus", "softsign", "silu", "relu6", "hard_sigmoid", "hard_silu",
                                           "exponential", "mish", "leaky_relu", "log_sigmoid"));

TEST(FlattenGradient, MatchesFiniteDifferences) {
  std::mt19937_64 rng(12);
  Flatten layer("flatten");
  layer.build({2, 3, 2}, 0, DType::Float64);
  EXPECT_EQ(layer.output_shape(), Shape{12});
  check_layer_gradients(layer, random_tensor({3, 2, 3, 2}, rng), ForwardContext{}, 103);
}

TEST(DropoutGradient, MatchesFiniteDifferencesInTraining) {
  std::mt19937_64 rng(13);
  Dropout layer("dropout", 0.4, 77);
  layer.build({3, 4}, 0, DType::Float64);
  // A fixed context fixes the mask, so forward is a fixed linear map that the differences see.
  ForwardContext ctx;
  ctx.training = true;
  ctx.step = 5;
  ctx.global_row_offset = 7;
  Tensor x = random_tensor({6, 3, 4}, rng);
  Tensor y = layer.forward(x, ctx);
  std::int64_t dropped = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) dropped += y.data<double>()[i] == 0.0;
  ASSERT_GT(dropped, 0);  // the check must see both kinds of element
  ASSERT_LT(dropped, y.numel());
  check_layer_gradients(layer, x, ctx, 104);
}

TEST(DropoutGradient, InferenceAndRateZeroAreTheIdentity) {
  std::mt19937_64 rng(14);
  for (double rate : {0.0, 0.5}) {
    Dropout layer("dropout", rate, 1);
    layer.build({4}, 0, DType::Float64);
    ForwardContext ctx;
    ctx.training = rate == 0.0;
    check_layer_gradients(layer, random_tensor({3, 4}, rng), ctx, 105);
  }
}

TEST(LayerStackGradient, MatchesFiniteDifferencesThroughEveryLayer) {
  std::mt19937_64 rng(15);
  LayerStack stack;
  Dense::Options a;
  a.units = 6;
  a.activation = "tanh";
  stack.add(std::make_shared<Dense>("d1", a));
  stack.add(std::make_shared<Dropout>("drop", 0.3, 5));
  Dense::Options b;
  b.units = 4;
  b.activation = "gelu";
  b.kernel_regularizer = "l2";
  stack.add(std::make_shared<Dense>("d2", b));
  stack.add(std::make_shared<ActivationLayer>("softmax", "softmax"));
  stack.build({2, 3}, 42, DType::Float64);
  // Non-zero biases, so their gradients and the activations' offsets are exercised too.
  for (auto* p : stack.parameters())
    if (p->name.find("bias") != std::string::npos)
      for (std::int64_t i = 0; i < p->value.numel(); ++i)
        p->value.data<double>()[i] = 0.1 * static_cast<double>(i + 1) - 0.25;
  Tensor x = random_tensor({2, 2, 3}, rng);
  ForwardContext ctx{true, 2, 3};
  Tensor y = stack.forward(x, ctx);
  const Tensor G = random_tensor(y.shape(), rng);
  stack.backward(G);
  stack.add_regularization_gradients();
  const Tensor grads = stack.packed_grads().clone();
  auto loss = [&] { return dot(G, stack.forward(x, ctx)) + stack.regularization_loss(); };
  expect_close(grads, numeric_gradient(stack.packed_values(), loss), "packed gradients");
}

}  // namespace
}  // namespace mdtrain
