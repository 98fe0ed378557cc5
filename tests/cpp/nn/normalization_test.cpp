// BatchNormalization and LayerNormalization on one replica: float64 gradient checks against
// central finite differences (input, gamma, beta; 2-D and 4-D inputs; center/scale off), values
// against Keras's formulas computed by hand on known numbers (training, inference, moving
// statistics), weight order and trainable flags, how a LayerStack packs non-trainable weights,
// config round trips and the errors for bad arguments and inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/layer_normalization.h"
#include "mdtrain/nn/layer_stack.h"
#include "gradient_check.h"

namespace mdtrain {
namespace {

// check_layer_gradients, random_tensor, dot, expect_close, numeric_gradient (eps 1e-6, rtol 1e-6,
// atol 1e-8): the float64 gradient check shared by the layer tests.
using namespace testing;

Tensor from_values(const Shape& shape, const std::vector<double>& v, DType dtype = DType::Float32) {
  Tensor t(shape, dtype);
  EXPECT_EQ(t.numel(), static_cast<std::int64_t>(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::Float64) t.data<double>()[i] = v[i];
    else t.data<float>()[i] = static_cast<float>(v[i]);
  }
  return t;
}

double at(const Tensor& t, std::int64_t i) {
  return t.dtype() == DType::Float32 ? static_cast<double>(t.data<float>()[i]) : t.data<double>()[i];
}

// Random gamma and beta (not the 1 and 0 they start at), so their gradients are exercised.
void randomize(Parameter& p, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  for (std::int64_t i = 0; i < p.value.numel(); ++i) p.value.data<double>()[i] = u(rng);
}

ForwardContext training() {
  ForwardContext ctx;
  ctx.training = true;
  return ctx;
}

// ---- gradient checks ----------------------------------------------------------------------------

struct NormCase {
  Shape input_shape;  // without the batch axis
  std::int64_t batch;
  bool center, scale;
  bool synchronized;
};

std::string case_name(const NormCase& c) {
  std::string s = "rank" + std::to_string(c.input_shape.size() + 1);
  s += c.center ? "_center" : "_nocenter";
  s += c.scale ? "_scale" : "_noscale";
  if (c.synchronized) s += "_sync";
  return s;
}

void PrintTo(const NormCase& c, std::ostream* os) { *os << case_name(c); }

class BatchNormGradient : public ::testing::TestWithParam<NormCase> {};

TEST_P(BatchNormGradient, TrainingModeMatchesFiniteDifferences) {
  const NormCase c = GetParam();
  BatchNormalization::Options o;
  o.center = c.center;
  o.scale = c.scale;
  o.synchronized = c.synchronized;
  o.gamma_regularizer = "l2";
  BatchNormalization bn("bn", o);
  bn.build(c.input_shape, 7, DType::Float64);
  std::mt19937_64 rng(11);
  if (c.scale) randomize(bn.gamma(), rng, 0.5, 2.0);
  if (c.center) randomize(bn.beta(), rng, -0.5, 0.5);
  Shape xs{c.batch};
  xs.insert(xs.end(), c.input_shape.begin(), c.input_shape.end());
  // An offset and uneven spread per channel, as real activations have.
  Tensor x = random_tensor(xs, rng, -1.0, 3.0);
  const std::size_t checked = check_layer_gradients(bn, x, training(), 21, /*with_regularization=*/c.scale);
  EXPECT_EQ(checked, (c.center ? 1u : 0u) + (c.scale ? 1u : 0u));
}

TEST(BatchNormGradient, InferenceModeMatchesFiniteDifferences) {
  BatchNormalization bn("bn", {});
  bn.build({3}, 7, DType::Float64);
  std::mt19937_64 rng(12);
  randomize(bn.gamma(), rng, 0.5, 2.0);
  randomize(bn.beta(), rng, -0.5, 0.5);
  randomize(bn.moving_mean(), rng, -0.5, 0.5);
  randomize(bn.moving_variance(), rng, 0.5, 2.0);
  check_layer_gradients(bn, random_tensor({5, 3}, rng), ForwardContext{}, 22);
}

INSTANTIATE_TEST_SUITE_P(Cases, BatchNormGradient,
                         ::testing::Values(NormCase{{4}, 6, true, true, false},
                                           NormCase{{2, 3, 5}, 2, true, true, false},
                                           NormCase{{4}, 6, false, true, false}, NormCase{{4}, 6, true, false, false},
                                           NormCase{{2, 2, 3}, 3, false, false, false},
                                           NormCase{{4}, 6, true, true, true},
                                           NormCase{{2, 3, 5}, 2, true, true, true}),
                         [](const ::testing::TestParamInfo<NormCase>& info) { return case_name(info.param); });

class LayerNormGradient : public ::testing::TestWithParam<NormCase> {};

TEST_P(LayerNormGradient, MatchesFiniteDifferences) {
  const NormCase c = GetParam();
  LayerNormalization::Options o;
  o.center = c.center;
  o.scale = c.scale;
  o.beta_regularizer = "l2";
  LayerNormalization ln("ln", o);
  ln.build(c.input_shape, 8, DType::Float64);
  std::mt19937_64 rng(13);
  if (c.scale) randomize(ln.gamma(), rng, 0.5, 2.0);
  if (c.center) randomize(ln.beta(), rng, -0.5, 0.5);
  Shape xs{c.batch};
  xs.insert(xs.end(), c.input_shape.begin(), c.input_shape.end());
  Tensor x = random_tensor(xs, rng, -1.0, 3.0);
  const std::size_t checked = check_layer_gradients(ln, x, training(), 23, /*with_regularization=*/c.center);
  EXPECT_EQ(checked, (c.center ? 1u : 0u) + (c.scale ? 1u : 0u));
}

INSTANTIATE_TEST_SUITE_P(Cases, LayerNormGradient,
                         ::testing::Values(NormCase{{6}, 5, true, true, false}, NormCase{{3, 4}, 2, true, true, false},
                                           NormCase{{2, 2, 5}, 2, true, true, false},
                                           NormCase{{6}, 5, false, true, false}, NormCase{{6}, 5, true, false, false},
                                           NormCase{{6}, 5, false, false, false}),
                         [](const ::testing::TestParamInfo<NormCase>& info) { return case_name(info.param); });

// ---- values against Keras's formulas -------------------------------------------------------------

// x (4 rows, 2 channels): channel 0 = 1, 3, 5, 7 (mean 4, biased variance 5); channel 1 =
// 2, 6, 10, 2 (mean 5, biased variance 11).
const std::vector<double> kX = {1, 2, 3, 6, 5, 10, 7, 2};

BatchNormalization::Options known_options() {
  BatchNormalization::Options o;
  o.momentum = 0.9;
  o.epsilon = 1e-3;
  return o;
}

void set_known_affine(BatchNormalization& bn) {
  bn.gamma().value.copy_from(from_values({2}, {2.0, 0.5}));
  bn.beta().value.copy_from(from_values({2}, {0.1, -1.0}));
}

TEST(BatchNormValues, TrainingUsesBatchStatisticsAndUpdatesTheMovingOnes) {
  for (bool sync : {false, true}) {
    SCOPED_TRACE(sync ? "synchronized" : "per replica");
    auto o = known_options();
    o.synchronized = sync;
    BatchNormalization bn("bn", o);
    bn.build({2}, 1);
    set_known_affine(bn);
    const Tensor y = bn.forward(from_values({4, 2}, kX), training());
    const double gamma[2] = {2.0, 0.5}, beta[2] = {0.1, -1.0}, mean[2] = {4, 5}, var[2] = {5, 11};
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 2; ++c) {
        const double expected = gamma[c] * (kX[r * 2 + c] - mean[c]) / std::sqrt(var[c] + 1e-3) + beta[c];
        EXPECT_NEAR(at(y, r * 2 + c), expected, 1e-6 * std::fabs(expected) + 1e-6) << r << "," << c;
      }
    // moving = moving * 0.9 + batch * 0.1 from the initial 0 and 1.
    EXPECT_NEAR(at(bn.moving_mean().value, 0), 0.4, 1e-7);
    EXPECT_NEAR(at(bn.moving_mean().value, 1), 0.5, 1e-7);
    EXPECT_NEAR(at(bn.moving_variance().value, 0), 0.9 + 0.5, 1e-6);
    EXPECT_NEAR(at(bn.moving_variance().value, 1), 0.9 + 1.1, 1e-6);
    // A second step on the same data: 0.4 * 0.9 + 4 * 0.1 = 0.76; 1.4 * 0.9 + 0.5 = 1.76.
    bn.forward(from_values({4, 2}, kX), training());
    EXPECT_NEAR(at(bn.moving_mean().value, 0), 0.76, 1e-6);
    EXPECT_NEAR(at(bn.moving_variance().value, 0), 1.76, 1e-6);
  }
}

TEST(BatchNormValues, InferenceUsesTheMovingStatisticsAndChangesNothing) {
  BatchNormalization bn("bn", known_options());
  bn.build({2}, 1);
  set_known_affine(bn);
  bn.moving_mean().value.copy_from(from_values({2}, {0.4, 0.5}));
  bn.moving_variance().value.copy_from(from_values({2}, {1.4, 2.0}));
  const Tensor y = bn.forward(from_values({4, 2}, kX), ForwardContext{});
  const double gamma[2] = {2.0, 0.5}, beta[2] = {0.1, -1.0}, mean[2] = {0.4, 0.5}, var[2] = {1.4, 2.0};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 2; ++c) {
      const double expected = gamma[c] * (kX[r * 2 + c] - mean[c]) / std::sqrt(var[c] + 1e-3) + beta[c];
      EXPECT_NEAR(at(y, r * 2 + c), expected, 1e-6 * std::fabs(expected)) << r << "," << c;
    }
  EXPECT_FLOAT_EQ(static_cast<float>(at(bn.moving_mean().value, 0)), 0.4f);
  EXPECT_FLOAT_EQ(static_cast<float>(at(bn.moving_variance().value, 1)), 2.0f);
}

TEST(BatchNormValues, FeatureMapsAreNormalizedOverBatchAndPositions) {
  // (2, 1, 2, 2): the same 4 rows of 2 channels as kX laid out as 2 samples of a 1x2 map.
  BatchNormalization map_bn("bn", known_options()), flat_bn("bn_flat", known_options());
  map_bn.build({1, 2, 2}, 1);
  flat_bn.build({2}, 1);
  const Tensor ym = map_bn.forward(from_values({2, 1, 2, 2}, kX), training()).clone();
  const Tensor yf = flat_bn.forward(from_values({4, 2}, kX), training());
  ASSERT_EQ(ym.shape(), (Shape{2, 1, 2, 2}));
  for (std::int64_t i = 0; i < 8; ++i) EXPECT_EQ(at(ym, i), at(yf, i));
  EXPECT_EQ(at(map_bn.moving_variance().value, 1), at(flat_bn.moving_variance().value, 1));
}

TEST(BatchNormValues, CenterAndScaleOffGiveThePlainNormalization) {
  auto o = known_options();
  o.center = false;
  o.scale = false;
  BatchNormalization bn("bn", o);
  bn.build({2}, 1);
  EXPECT_EQ(bn.parameters().size(), 2u);  // moving_mean, moving_variance
  const Tensor y = bn.forward(from_values({4, 2}, kX), training());
  EXPECT_NEAR(at(y, 0), (1 - 4) / std::sqrt(5.001), 1e-6);
  EXPECT_NEAR(at(y, 3), (6 - 5) / std::sqrt(11.001), 1e-6);
}

TEST(LayerNormValues, NormalizesEachRowOverTheLastAxis) {
  LayerNormalization ln("ln", {});
  ln.build({2, 4}, 1);
  ln.gamma().value.copy_from(from_values({4}, {1.0, 2.0, 0.5, -1.0}));
  ln.beta().value.copy_from(from_values({4}, {0.0, 0.1, 0.2, 0.3}));
  // Rows: (1, 2, 3, 4): mean 2.5, biased variance 1.25; (10, 10, 10, 14): mean 11, variance 3.
  const std::vector<double> x = {1, 2, 3, 4, 10, 10, 10, 14};
  const Tensor y = ln.forward(from_values({1, 2, 4}, x), ForwardContext{});
  const double gamma[4] = {1.0, 2.0, 0.5, -1.0}, beta[4] = {0.0, 0.1, 0.2, 0.3};
  const double mean[2] = {2.5, 11}, var[2] = {1.25, 3};
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 4; ++c) {
      const double expected = gamma[c] * (x[r * 4 + c] - mean[r]) / std::sqrt(var[r] + 1e-3) + beta[c];
      EXPECT_NEAR(at(y, r * 4 + c), expected, 1e-6 * std::fabs(expected) + 1e-7) << r << "," << c;
    }
  // The same in training: no batch statistics, nothing that depends on the split.
  const Tensor yt = ln.forward(from_values({1, 2, 4}, x), training());
  EXPECT_NEAR(at(yt, 7), -1.0 * (14 - 11) / std::sqrt(3.001) + 0.3, 1e-6);
}

// ---- weights, packing, clone, config --------------------------------------------------------------

TEST(BatchNormWeights, KerasOrderNamesAndTrainableFlags) {
  BatchNormalization bn("bn", {});
  bn.build({8, 8, 64}, 3);
  auto p = bn.parameters();
  ASSERT_EQ(p.size(), 4u);
  const char* names[] = {"bn/gamma", "bn/beta", "bn/moving_mean", "bn/moving_variance"};
  const bool trainable[] = {true, true, false, false};
  const double initial[] = {1, 0, 0, 1};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(p[i]->name, names[i]);
    EXPECT_EQ(p[i]->trainable, trainable[i]) << names[i];
    EXPECT_EQ(p[i]->value.shape(), (Shape{64}));
    EXPECT_EQ(at(p[i]->value, 17), initial[i]) << names[i];
  }
  BatchNormalization::Options no_center;
  no_center.center = false;
  BatchNormalization bn2("bn2", no_center);
  bn2.build({5}, 3);
  ASSERT_EQ(bn2.parameters().size(), 3u);
  EXPECT_EQ(bn2.parameters()[0]->name, "bn2/gamma");
  EXPECT_EQ(bn2.parameters()[1]->name, "bn2/moving_mean");
}

TEST(BatchNormWeights, StackPacksOnlyTrainableWeightsForTheOptimizer) {
  LayerStack stack;
  Dense::Options d;
  d.units = 4;
  stack.add(std::make_shared<Dense>("dense", d));
  stack.add(std::make_shared<BatchNormalization>("bn", BatchNormalization::Options{}));
  Dense::Options d2;
  d2.units = 2;
  stack.add(std::make_shared<Dense>("dense_1", d2));
  stack.build({3}, 5);
  const std::int64_t trainable = 3 * 4 + 4 + 4 + 4 + 4 * 2 + 2;
  EXPECT_EQ(stack.trainable_count(), trainable);
  EXPECT_EQ(stack.parameter_count(), trainable + 8);
  EXPECT_EQ(stack.packed_grads().numel(), trainable);
  EXPECT_EQ(stack.non_trainable_values().numel(), 8);
  // get_weights order: the Keras order layer by layer, moving statistics in the middle.
  auto all = stack.parameters();
  ASSERT_EQ(all.size(), 8u);
  EXPECT_EQ(all[4]->name, "bn/moving_mean");
  EXPECT_EQ(all[6]->name, "dense_1/kernel");
  auto t = stack.trainable_parameters();
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[4]->name, "dense_1/kernel");
  // The moving statistics live in the non-trainable buffer and have no gradient.
  for (auto* p : stack.non_trainable_parameters()) {
    EXPECT_FALSE(p->grad.defined()) << p->name;
    EXPECT_GE(static_cast<const char*>(p->value.raw()), static_cast<const char*>(stack.non_trainable_values().raw()));
  }
  EXPECT_EQ(at(stack.non_trainable_values(), 4), 1.0);  // moving_variance starts at 1

  // A training step changes the moving statistics; clone() copies them.
  Tensor x({6, 3});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 5) - 1.5f;
  ForwardContext ctx = training();
  stack.forward(x, ctx);
  Tensor dy = Tensor::zeros({6, 2});
  dy.fill(0.25);
  stack.backward(dy);
  EXPECT_NE(at(stack.non_trainable_values(), 4), 1.0);
  auto copy = stack.clone();
  EXPECT_EQ(std::memcmp(copy->non_trainable_values().raw(), stack.non_trainable_values().raw(),
                        stack.non_trainable_values().nbytes()),
            0);
  EXPECT_EQ(std::memcmp(copy->packed_values().raw(), stack.packed_values().raw(), stack.packed_values().nbytes()), 0);
  EXPECT_EQ(copy->parameters()[5]->trainable, false);
  EXPECT_FALSE(copy->parameters()[5]->value.same_storage(stack.parameters()[5]->value));
}

TEST(BatchNormWeights, AStepWithoutRowsAndNoOtherReplicaChangesNothing) {
  BatchNormalization bn("bn", {});
  bn.build({3}, 1);
  const Tensor before = bn.moving_variance().value.clone();
  ForwardContext ctx = training();
  bn.forward_without_rows(ctx);
  bn.backward_without_rows(true);
  EXPECT_EQ(std::memcmp(before.raw(), bn.moving_variance().value.raw(), before.nbytes()), 0);
}

TEST(NormalizationConfig, RoundTripsThroughTheLayerFactory) {
  BatchNormalization::Options o;
  o.momentum = 0.9;
  o.epsilon = 1e-5;
  o.center = false;
  o.synchronized = true;
  o.gamma_regularizer = "l2";
  BatchNormalization bn("bn", o);
  const Json spec = layer_to_config(bn);
  EXPECT_EQ(spec.at("class_name").as_string(), "BatchNormalization");
  EXPECT_EQ(spec.at("config").at("axis").as_int(), -1);
  EXPECT_TRUE(spec.at("config").at("synchronized").as_bool());
  auto back = layer_from_config(spec);
  auto* b = dynamic_cast<BatchNormalization*>(back.get());
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->options().momentum, 0.9);
  EXPECT_EQ(b->options().epsilon, 1e-5);
  EXPECT_FALSE(b->options().center);
  EXPECT_TRUE(b->options().synchronized);
  EXPECT_EQ(layer_to_config(*back).dump(), spec.dump());

  LayerNormalization::Options lo;
  lo.epsilon = 1e-6;
  lo.scale = false;
  LayerNormalization ln("ln", lo);
  const Json lspec = layer_to_config(ln);
  auto lback = layer_from_config(lspec);
  EXPECT_EQ(lback->class_name(), "LayerNormalization");
  EXPECT_EQ(layer_to_config(*lback).dump(), lspec.dump());
  // Keras writes LayerNormalization's axis as a list when given one.
  Json listed = Json::parse(R"({"class_name": "LayerNormalization", "config": {"name": "l", "axis": [-1]}})");
  EXPECT_EQ(layer_from_config(listed)->class_name(), "LayerNormalization");
}

// ---- errors ---------------------------------------------------------------------------------------

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<wrong type> ") + e.what();
  }
  return "<no exception>";
}

TEST(NormalizationErrors, FeatureCountMismatchOnABuiltLayerNamesLayerAndShapes) {
  BatchNormalization bn("bn_a", {});
  bn.build({4}, 1);
  const std::string m = message_of([&] { bn.forward(Tensor({2, 5}), training()); });
  EXPECT_NE(m.find("\"bn_a\""), std::string::npos) << m;
  EXPECT_NE(m.find("(None, 4)"), std::string::npos) << m;
  EXPECT_NE(m.find("(2, 5)"), std::string::npos) << m;
  LayerNormalization ln("ln_a", {});
  ln.build({3, 4}, 1);
  const std::string l = message_of([&] { ln.forward(Tensor({2, 3, 5}), ForwardContext{}); });
  EXPECT_NE(l.find("\"ln_a\""), std::string::npos) << l;
  EXPECT_NE(l.find("(2, 3, 5)"), std::string::npos) << l;
}

TEST(NormalizationErrors, OnlyTheLastAxisIsSupported) {
  BatchNormalization::Options o;
  o.axis = 1;  // channels_first for a 4-D input
  BatchNormalization bn("bn_b", o);
  const std::string m = message_of([&] { bn.build({16, 8, 8}, 1); });
  EXPECT_NE(m.find("\"bn_b\""), std::string::npos) << m;
  EXPECT_NE(m.find("only axis=-1"), std::string::npos) << m;
  EXPECT_NE(m.find("axis=3 for inputs of shape (None, 16, 8, 8)"), std::string::npos) << m;
  EXPECT_NE(m.find("got axis=1"), std::string::npos) << m;
  EXPECT_FALSE(bn.built());
  // The last axis by its index is fine.
  o.axis = 3;
  BatchNormalization ok("bn_c", o);
  ok.build({16, 8, 8}, 1);
  EXPECT_EQ(ok.parameters()[0]->value.shape(), (Shape{8}));
  for (std::int64_t axis : {0, -2}) {
    BatchNormalization::Options bad;
    bad.axis = axis;
    const std::string b = message_of([&] { BatchNormalization("bn_d", bad); });
    EXPECT_NE(b.find("only axis=-1"), std::string::npos) << b;
    EXPECT_NE(b.find("\"bn_d\""), std::string::npos) << b;
  }
  LayerNormalization::Options lo;
  lo.axis = 1;
  LayerNormalization ln("ln_b", lo);
  const std::string l = message_of([&] { ln.build({3, 4}, 1); });
  EXPECT_NE(l.find("\"ln_b\""), std::string::npos) << l;
  EXPECT_NE(l.find("axis=2 for inputs of shape (None, 3, 4)"), std::string::npos) << l;
  const std::string multi = message_of([&] {
    layer_from_config(Json::parse(R"({"class_name": "LayerNormalization", "config": {"name": "l", "axis": [1, 2]}})"));
  });
  EXPECT_NE(multi.find("only one normalization axis"), std::string::npos) << multi;
}

TEST(NormalizationErrors, BadHyperparametersAndRankOneInputs) {
  BatchNormalization::Options o;
  o.momentum = 1.5;
  EXPECT_NE(message_of([&] { BatchNormalization("bn", o); }).find("momentum must be in [0, 1], got 1.5"),
            std::string::npos);
  o.momentum = 0.9;
  o.epsilon = -1;
  EXPECT_NE(message_of([&] { BatchNormalization("bn", o); }).find("epsilon"), std::string::npos);
  o.epsilon = 1e-3;
  o.gamma_initializer = "no_such_initializer";
  EXPECT_THROW(BatchNormalization("bn", o), std::invalid_argument);
  BatchNormalization bn("bn_e", {});
  const std::string m = message_of([&] { bn.build({}, 1); });
  EXPECT_NE(m.find("\"bn_e\" needs inputs of rank >= 2"), std::string::npos) << m;
  LayerNormalization ln("ln_e", {});
  EXPECT_NE(message_of([&] { ln.build({}, 1); }).find("\"ln_e\" needs inputs of rank >= 2"), std::string::npos);
}

}  // namespace
}  // namespace mdtrain
