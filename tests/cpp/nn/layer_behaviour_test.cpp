// Layer behaviour beyond gradients: initializer statistics against Keras's formulas, config round
// trips through layer_factory, input-shape errors, cloning, and Dropout's determinism (including
// that its mask does not depend on how a batch is split across replicas).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/initializer.h"
#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/layer_stack.h"

namespace mdtrain {
namespace {

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  Tensor t(shape, dtype);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::Float32) t.data<float>()[i] = static_cast<float>(d(rng));
    else t.data<double>()[i] = d(rng);
  }
  return t;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// ---- initializers -------------------------------------------------------------------------------

struct Stats {
  double mean = 0, variance = 0, min = INFINITY, max = -INFINITY;
};

Stats stats_of(const Tensor& t) {
  Stats s;
  const double* p = t.data<double>();
  const double n = static_cast<double>(t.numel());
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s.mean += p[i];
    s.min = std::min(s.min, p[i]);
    s.max = std::max(s.max, p[i]);
  }
  s.mean /= n;
  for (std::int64_t i = 0; i < t.numel(); ++i) s.variance += (p[i] - s.mean) * (p[i] - s.mean);
  s.variance /= n;
  return s;
}

constexpr std::int64_t kSamples = 200 * 300;
constexpr std::int64_t kFanIn = 200, kFanOut = 300;

Tensor draw(const Json& spec, std::uint64_t seed = 3) {
  Tensor t({kFanIn, kFanOut}, DType::Float64);
  Rng rng(seed, 0);
  make_initializer(spec)->fill(t, kFanIn, kFanOut, rng);
  return t;
}

// With 60000 draws the sample variance of these distributions has a relative standard deviation
// below 0.6%; 4% is over 6 of them. The mean is checked to 5 standard errors.
void expect_moments(const Stats& s, double mean, double variance) {
  EXPECT_NEAR(s.mean, mean, 5.0 * std::sqrt(variance / kSamples));
  EXPECT_NEAR(s.variance, variance, 0.04 * variance);
}

TEST(Initializers, GlorotUniformMatchesKerasLimit) {
  const double limit = std::sqrt(6.0 / (kFanIn + kFanOut));
  for (const char* name : {"glorot_uniform", "GlorotUniform"}) {
    Stats s = stats_of(draw(name));
    EXPECT_GE(s.min, -limit);
    EXPECT_LT(s.max, limit);
    EXPECT_LT(s.min, -0.99 * limit);  // the whole range is used
    EXPECT_GT(s.max, 0.99 * limit);
    expect_moments(s, 0.0, limit * limit / 3.0);
  }
}

TEST(Initializers, GlorotNormalIsTruncatedWithCorrectedVariance) {
  // Keras: truncated normal with stddev sqrt(1/fan_avg) / 0.8796..., cut at two of those stddevs,
  // which leaves the variance at 1/fan_avg.
  const double variance = 2.0 / (kFanIn + kFanOut);
  const double bound = 2.0 * std::sqrt(variance) / 0.87962566103423978;
  Stats s = stats_of(draw("glorot_normal"));
  EXPECT_GE(s.min, -bound);
  EXPECT_LE(s.max, bound);
  EXPECT_GT(s.max, 0.95 * bound);
  expect_moments(s, 0.0, variance);
}

TEST(Initializers, HeNormalAndHeUniformUseFanIn) {
  Stats n = stats_of(draw("he_normal"));
  expect_moments(n, 0.0, 2.0 / kFanIn);
  EXPECT_LE(n.max, 2.0 * std::sqrt(2.0 / kFanIn) / 0.87962566103423978);
  const double limit = std::sqrt(6.0 / kFanIn);
  Stats u = stats_of(draw("HeUniform"));
  EXPECT_GE(u.min, -limit);
  EXPECT_LT(u.max, limit);
  expect_moments(u, 0.0, limit * limit / 3.0);
}

TEST(Initializers, RandomNormalAndUniformDefaultsAndConfigs) {
  expect_moments(stats_of(draw("random_normal")), 0.0, 0.05 * 0.05);
  Json normal = Json::parse(R"({"class_name": "RandomNormal", "config": {"mean": 1.5, "stddev": 0.5}})");
  expect_moments(stats_of(draw(normal)), 1.5, 0.25);

  Stats u = stats_of(draw("random_uniform"));
  EXPECT_GE(u.min, -0.05);
  EXPECT_LT(u.max, 0.05);
  expect_moments(u, 0.0, 0.1 * 0.1 / 12.0);
  Json uniform = Json::parse(R"({"class_name": "RandomUniform", "config": {"minval": 2, "maxval": 5}})");
  Stats v = stats_of(draw(uniform));
  EXPECT_GE(v.min, 2.0);
  EXPECT_LT(v.max, 5.0);
  expect_moments(v, 3.5, 9.0 / 12.0);
}

TEST(Initializers, Constants) {
  Stats z = stats_of(draw("zeros")), o = stats_of(draw("ones"));
  EXPECT_EQ(z.min, 0.0);
  EXPECT_EQ(z.max, 0.0);
  EXPECT_EQ(o.min, 1.0);
  EXPECT_EQ(o.max, 1.0);
  Stats c = stats_of(draw(Json::parse(R"({"class_name": "Constant", "config": {"value": 0.3}})")));
  EXPECT_EQ(c.min, 0.3);
  EXPECT_EQ(c.max, 0.3);
}

TEST(Initializers, DeterministicPerSeedAndFloat32IsRoundedFloat64) {
  EXPECT_TRUE(bitwise_equal(draw("glorot_uniform", 5), draw("glorot_uniform", 5)));
  EXPECT_FALSE(bitwise_equal(draw("glorot_uniform", 5), draw("glorot_uniform", 6)));
  EXPECT_FALSE(bitwise_equal(draw("he_normal", 5), draw("he_normal", 6)));
  const Tensor d = draw("glorot_normal", 8);
  Tensor f({kFanIn, kFanOut}, DType::Float32);
  Rng rng(8, 0);
  make_initializer("glorot_normal")->fill(f, kFanIn, kFanOut, rng);
  for (std::int64_t i = 0; i < f.numel(); ++i)
    ASSERT_EQ(f.data<float>()[i], static_cast<float>(d.data<double>()[i])) << i;
}

TEST(Initializers, UnknownNamesAreRejected) {
  const std::string msg = message_of([] { make_initializer("glorot_uniformm"); });
  EXPECT_EQ(msg.rfind("[initializer]", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, "glorot_uniformm")) << msg;
  EXPECT_THROW(make_initializer("nope"), std::invalid_argument);
  EXPECT_THROW(make_initializer(Json(3.0)), std::invalid_argument);
  Dense::Options o;
  o.units = 2;
  o.kernel_initializer = "nope";
  EXPECT_THROW(Dense("d", o), std::invalid_argument);  // at construction, not at build
}

TEST(Initializers, DenseUsesGlorotUniformKernelAndZeroBias) {
  Dense::Options o;
  o.units = 300;
  Dense d("d", o);
  d.build({200}, 17, DType::Float64);
  const double limit = std::sqrt(6.0 / (200 + 300));
  Stats k = stats_of(d.kernel().value);
  EXPECT_GE(k.min, -limit);
  EXPECT_LT(k.max, limit);
  expect_moments(k, 0.0, limit * limit / 3.0);
  Stats b = stats_of(d.bias().value);
  EXPECT_EQ(b.min, 0.0);
  EXPECT_EQ(b.max, 0.0);
}

// ---- configs ------------------------------------------------------------------------------------

void expect_round_trip(const Layer& layer) {
  const Json original = layer_to_config(layer);
  EXPECT_EQ(original.at("class_name").as_string(), layer.class_name());
  EXPECT_EQ(original.at("config").at("name").as_string(), layer.name());
  // Through text, as a model file stores it.
  auto rebuilt = layer_from_config(Json::parse(original.dump(2)));
  EXPECT_EQ(rebuilt->class_name(), layer.class_name());
  EXPECT_EQ(rebuilt->name(), layer.name());
  EXPECT_EQ(layer_to_config(*rebuilt), original) << original.dump(2) << "\nvs\n" << layer_to_config(*rebuilt).dump(2);
}

TEST(LayerConfig, DenseDefaultsAreKeras) {
  Dense::Options o;
  o.units = 7;
  Dense d("dense_3", o);
  const Json c = d.config();
  EXPECT_EQ(c.at("units").as_int(), 7);
  EXPECT_EQ(c.at("activation").as_string(), "linear");
  EXPECT_TRUE(c.at("use_bias").as_bool());
  EXPECT_TRUE(c.at("trainable").as_bool());
  EXPECT_EQ(c.at("kernel_initializer").at("class_name").as_string(), "GlorotUniform");
  EXPECT_EQ(c.at("bias_initializer").at("class_name").as_string(), "Zeros");
  EXPECT_TRUE(c.at("kernel_regularizer").is_null());
  EXPECT_TRUE(c.at("bias_regularizer").is_null());
  expect_round_trip(d);
}

TEST(LayerConfig, DenseWithEveryOptionRoundTripsAndRebuildsTheSameWeights) {
  Dense::Options o;
  o.units = 6;
  o.activation = "GELU";
  o.use_bias = true;
  o.kernel_initializer = Json::parse(R"({"class_name": "RandomNormal", "config": {"mean": 0.1, "stddev": 0.3}})");
  o.bias_initializer = "random_uniform";
  o.kernel_regularizer = Json::parse(R"({"class_name": "L1L2", "config": {"l1": 0.001, "l2": 0.002}})");
  o.bias_regularizer = "l2";
  Dense d("dense_7", o);
  EXPECT_EQ(d.config().at("activation").as_string(), "gelu");
  expect_round_trip(d);

  auto rebuilt = layer_from_config(Json::parse(layer_to_config(d).dump()));
  d.build({5}, 99, DType::Float32);
  rebuilt->build({5}, 99, DType::Float32);
  auto p = d.parameters(), q = rebuilt->parameters();
  ASSERT_EQ(p.size(), q.size());
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(bitwise_equal(p[i]->value, q[i]->value)) << p[i]->name;
  EXPECT_EQ(d.regularization_loss(), rebuilt->regularization_loss());
  EXPECT_GT(d.regularization_loss(), 0.0);
  const Tensor x = random_tensor({3, 5}, DType::Float32, 1);
  EXPECT_TRUE(bitwise_equal(d.forward(x, {}).clone(), rebuilt->forward(x, {})));

  Dense::Options nb;
  nb.units = 2;
  nb.use_bias = false;
  nb.activation = "softmax";
  expect_round_trip(Dense("no_bias", nb));
}

TEST(LayerConfig, ActivationFlattenDropoutRoundTrip) {
  for (Activation activation : all_activations()) {
    const std::string a = name_of(activation);
    ActivationLayer layer("act", a);
    EXPECT_EQ(layer.config().at("activation").as_string(), a);
    expect_round_trip(layer);
  }
  // Keras's other spellings are read as the names Keras 3 writes.
  EXPECT_EQ(ActivationLayer("act", "swish").config().at("activation").as_string(), "silu");
  EXPECT_EQ(ActivationLayer("act", "hard_swish").config().at("activation").as_string(), "hard_silu");
  expect_round_trip(Flatten("flatten_2"));
  Dropout drop("dropout_1", 0.25, 12345);
  EXPECT_EQ(drop.config().at("rate").as_number(), 0.25);
  expect_round_trip(drop);
}

TEST(LayerConfig, RebuiltDropoutDropsTheSameElements) {
  Dropout drop("dropout", 0.5, 31337);
  auto rebuilt = layer_from_config(Json::parse(layer_to_config(drop).dump()));
  drop.build({16}, 0, DType::Float32);
  rebuilt->build({16}, 0, DType::Float32);
  const Tensor x = random_tensor({4, 16}, DType::Float32, 2);
  ForwardContext ctx{true, 4, 0};
  EXPECT_TRUE(bitwise_equal(drop.forward(x, ctx).clone(), rebuilt->forward(x, ctx)));
}

TEST(LayerConfig, UnknownClassIsRejected) {
  Json spec = Json::parse(R"({"class_name": "Conv3D", "config": {"name": "c"}})");
  const std::string msg = message_of([&] { layer_from_config(spec); });
  EXPECT_EQ(msg.rfind("[layers]", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, "Conv3D")) << msg;
  EXPECT_THROW(layer_from_config(spec), std::invalid_argument);
}

// ---- construction and input-shape errors -------------------------------------------------------

TEST(LayerErrors, BadConstructorArguments) {
  Dense::Options o;
  o.units = 0;
  std::string msg = message_of([&] { Dense("d", o); });
  EXPECT_EQ(msg.rfind("[dense]", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, "units")) << msg;
  o.units = -3;
  EXPECT_THROW(Dense("d", o), std::invalid_argument);
  o.units = 2;
  o.activation = "swishy";
  msg = message_of([&] { Dense("d", o); });
  EXPECT_EQ(msg.rfind("[activation]", 0), 0u) << msg;
  EXPECT_THROW(ActivationLayer("a", "swishy"), std::invalid_argument);
  o.activation = "relu";
  o.kernel_regularizer = "l3";
  EXPECT_THROW(Dense("d", o), std::invalid_argument);
  for (double rate : {1.0, -0.1, 2.0}) {
    msg = message_of([&] { Dropout("drop", rate, 0); });
    EXPECT_EQ(msg.rfind("[dropout]", 0), 0u) << msg;
    EXPECT_THROW(Dropout("drop", rate, 0), std::invalid_argument);
  }
}

TEST(LayerErrors, BuildRejectsShapesAndDtypesThatCannotWork) {
  Dense::Options o;
  o.units = 3;
  Dense d("dense_x", o);
  std::string msg = message_of([&] { d.build({}, 0); });
  EXPECT_EQ(msg.rfind("[dense]", 0), 0u) << msg;
  EXPECT_THROW(d.build({}, 0), std::invalid_argument);
  msg = message_of([&] { d.build({4, 0}, 0); });
  EXPECT_TRUE(contains(msg, "dense_x")) << msg;
  EXPECT_THROW(d.build({4, 0}, 0), std::invalid_argument);
  EXPECT_THROW(d.build({4}, 0, DType::Int32), std::invalid_argument);
  EXPECT_FALSE(d.built());
}

TEST(LayerErrors, ForwardRejectsIncompatibleInputs) {
  Dense::Options o;
  o.units = 3;
  Dense d("dense_in", o);
  // Before build.
  Tensor x({2, 4});
  x.fill(0.5);
  EXPECT_THROW(d.forward(x, {}), std::logic_error);
  d.build({4}, 0);
  EXPECT_NO_THROW(d.forward(x, {}));
  Tensor wrong({2, 5});
  const std::string msg = message_of([&] { d.forward(wrong, {}); });
  EXPECT_EQ(msg.rfind("[layer]", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, "dense_in")) << msg;
  EXPECT_TRUE(contains(msg, "(None, 4)")) << msg;  // Keras's message: expected vs received
  EXPECT_TRUE(contains(msg, "(2, 5)")) << msg;
  EXPECT_THROW(d.forward(wrong, {}), std::invalid_argument);
  EXPECT_THROW(d.forward(Tensor({4}), {}), std::invalid_argument);                     // no batch axis
  EXPECT_THROW(d.forward(Tensor({2, 4}, DType::Float64), {}), std::invalid_argument);  // dtype

  Flatten f("flat");
  f.build({2, 3}, 0);
  EXPECT_THROW(f.forward(Tensor({5, 3, 2}), {}), std::invalid_argument);
  EXPECT_EQ(f.forward(Tensor({5, 2, 3}), {}).shape(), (Shape{5, 6}));
  ActivationLayer a("act", "relu");
  a.build({3}, 0);
  EXPECT_THROW(a.forward(Tensor({5, 4}), {}), std::invalid_argument);
  Dropout drop("drop", 0.5, 0);
  drop.build({3}, 0);
  EXPECT_THROW(drop.forward(Tensor({5, 4}), ForwardContext{true, 0, 0}), std::invalid_argument);
}

TEST(LayerErrors, StackRejectsDuplicateNamesAndEmptyBuild) {
  LayerStack empty;
  EXPECT_THROW(empty.build({3}, 0), std::invalid_argument);
  LayerStack s;
  Dense::Options o;
  o.units = 2;
  s.add(std::make_shared<Dense>("same", o));
  const std::string msg = message_of([&] { s.add(std::make_shared<Dense>("same", o)); });
  EXPECT_EQ(msg.rfind("[sequential]", 0), 0u) << msg;
  EXPECT_THROW(s.add(std::make_shared<Dense>("same", o)), std::invalid_argument);
  EXPECT_THROW(s.add(nullptr), std::invalid_argument);
}

// ---- cloning and stacks -------------------------------------------------------------------------

TEST(LayerClone, SameWeightsIndependentStorage) {
  Dense::Options o;
  o.units = 4;
  o.activation = "tanh";
  Dense d("d", o);
  d.build({3}, 5);
  auto c = d.clone();
  const Tensor x = random_tensor({2, 3}, DType::Float32, 3);
  const Tensor y = d.forward(x, {}).clone();
  EXPECT_TRUE(bitwise_equal(y, c->forward(x, {})));
  c->parameters()[0]->value.fill(0.0);
  EXPECT_TRUE(bitwise_equal(y, d.forward(x, {})));
  EXPECT_FALSE(bitwise_equal(y, c->forward(x, {})));
}

TEST(LayerStackBehaviour, SeedsLayersApartAndPacksParameters) {
  auto make = [](std::uint64_t seed) {
    auto s = std::make_unique<LayerStack>();
    Dense::Options o;
    o.units = 8;
    s->add(std::make_shared<Dense>("a", o));
    s->add(std::make_shared<Dense>("b", o));
    s->build({8}, seed);
    return s;
  };
  auto s1 = make(1), s1b = make(1), s2 = make(2);
  EXPECT_TRUE(bitwise_equal(s1->packed_values(), s1b->packed_values()));
  EXPECT_FALSE(bitwise_equal(s1->packed_values(), s2->packed_values()));
  auto p = s1->parameters();
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(s1->parameter_count(), 8 * 8 + 8 + 8 * 8 + 8);
  // Same-shaped layers at different positions get different weights.
  EXPECT_FALSE(bitwise_equal(p[0]->value, p[2]->value));
  // Parameters are views into the packed buffer.
  s1->packed_values().fill(0.25);
  EXPECT_EQ(p[2]->value.data<float>()[5], 0.25f);
  s1->packed_grads().fill(0.5);
  EXPECT_EQ(p[3]->grad.data<float>()[0], 0.5f);
}

TEST(LayerStackBehaviour, BackwardReportsWhereTheGradientsAreFinalAfterEachLayer) {
  // Dense(4) [3*4 + 4], Activation (no weights), Dropout (no weights), Dense(2, softmax) [4*2 + 2].
  LayerStack s;
  Dense::Options o;
  o.units = 4;
  s.add(std::make_shared<Dense>("a", o));
  s.add(std::make_shared<ActivationLayer>("act", "relu"));
  s.add(std::make_shared<Dropout>("drop", 0.5, 0));
  o.units = 2;
  o.activation = "softmax";
  s.add(std::make_shared<Dense>("b", o));
  s.build({3}, 7);
  // Layer i's gradients start at element 0, 16, 16, 16 of the packed buffer; backward reports
  // each layer when it is done, last first. Each report is checked against the gradients
  // actually written by then: poisoned values behind the reported point must be gone.
  const std::vector<std::int64_t> expected{16, 16, 16, 0};
  const Tensor x = random_tensor({5, 3}, DType::Float32, 1);
  for (bool from_logits : {false, true}) {
    s.packed_grads().fill(1e30);
    std::vector<std::int64_t> reported;
    auto on_final = [&](std::int64_t first) {
      reported.push_back(first);
      for (std::int64_t i = first; i < s.trainable_count(); ++i)
        ASSERT_NE(s.packed_grads().data<float>()[i], 1e30f) << "element " << i << " reported final too early";
    };
    const Tensor y = s.forward(x, ForwardContext{true, 0, 0});
    const Tensor dy = random_tensor(y.shape(), DType::Float32, 2);
    if (from_logits) s.backward_from_logits(dy, on_final);
    else s.backward(dy, on_final);
    EXPECT_EQ(reported, expected);
  }
  std::vector<std::int64_t> reported;
  s.step_without_rows(ForwardContext{true, 0, 0}, [&](std::int64_t first) { reported.push_back(first); });
  EXPECT_EQ(reported, expected);
}

// ---- Dropout determinism ------------------------------------------------------------------------

TEST(DropoutBehaviour, InferenceIsTheIdentity) {
  Dropout drop("drop", 0.5, 1);
  drop.build({6}, 0);
  const Tensor x = random_tensor({4, 6}, DType::Float32, 4);
  EXPECT_TRUE(bitwise_equal(drop.forward(x, ForwardContext{}).clone(), x));
  const Tensor g = random_tensor({4, 6}, DType::Float32, 5);
  EXPECT_TRUE(bitwise_equal(drop.backward(g, true).clone(), g));
}

TEST(DropoutBehaviour, DeterministicPerSeedAndStep) {
  const Tensor x = random_tensor({32, 50}, DType::Float32, 5);
  auto run = [&](std::uint64_t seed, std::uint64_t step) {
    Dropout drop("drop", 0.3, seed);
    drop.build({50}, 0);
    return drop.forward(x, ForwardContext{true, step, 0}).clone();
  };
  const Tensor a = run(7, 0);
  EXPECT_TRUE(bitwise_equal(a, run(7, 0)));
  EXPECT_FALSE(bitwise_equal(a, run(7, 1)));
  EXPECT_FALSE(bitwise_equal(a, run(8, 0)));
  std::int64_t dropped = 0;
  const float scale = static_cast<float>(1.0 / 0.7);
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const float v = a.data<float>()[i];
    if (v == 0.0f) {
      ++dropped;
    } else {
      ASSERT_EQ(v, x.data<float>()[i] * scale) << i;
    }
  }
  // Binomial(1600, 0.3): sd 18.3; 5 sd either side.
  EXPECT_NEAR(static_cast<double>(dropped), 0.3 * 1600, 5 * std::sqrt(1600 * 0.3 * 0.7));
}

// The mask depends only on (seed, step, global element position): running rows [0, 8) at once
// equals running [0, 3) and [3, 8) on separate layers told where their slice starts.
void check_split_invariance(const Shape& row_shape, std::int64_t base_offset) {
  Shape full{8};
  full.insert(full.end(), row_shape.begin(), row_shape.end());
  const Tensor x = random_tensor(full, DType::Float32, 6);
  const Tensor G = random_tensor(full, DType::Float32, 7);
  Dropout whole("drop", 0.5, 2024);
  whole.build(row_shape, 0);
  auto first = whole.clone(), second = whole.clone();
  const Tensor y = whole.forward(x, ForwardContext{true, 11, base_offset}).clone();
  const Tensor dx = whole.backward(G, true).clone();

  const Tensor y0 = first->forward(x.rows(0, 3), ForwardContext{true, 11, base_offset}).clone();
  const Tensor y1 = second->forward(x.rows(3, 8), ForwardContext{true, 11, base_offset + 3}).clone();
  EXPECT_TRUE(bitwise_equal(y.rows(0, 3).clone(), y0));
  EXPECT_TRUE(bitwise_equal(y.rows(3, 8).clone(), y1));
  EXPECT_TRUE(bitwise_equal(dx.rows(0, 3).clone(), first->backward(G.rows(0, 3), true).clone()));
  EXPECT_TRUE(bitwise_equal(dx.rows(3, 8).clone(), second->backward(G.rows(3, 8), true).clone()));
  // And the split point matters: the second slice told the wrong offset gets another mask.
  const Tensor wrong = second->forward(x.rows(3, 8), ForwardContext{true, 11, base_offset}).clone();
  EXPECT_FALSE(bitwise_equal(y.rows(3, 8).clone(), wrong));
}

TEST(DropoutBehaviour, MaskDoesNotDependOnHowTheBatchIsSplit) {
  check_split_invariance({5}, 0);
  check_split_invariance({2, 3}, 0);  // rows of several elements in several axes
  check_split_invariance({7}, 16);    // a slice that itself starts inside the global batch
}

}  // namespace
}  // namespace mdtrain
