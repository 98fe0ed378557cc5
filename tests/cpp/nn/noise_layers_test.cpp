// The noise and regularization layers (GaussianNoise, GaussianDropout, SpatialDropout1D/2D,
// ActivityRegularization): the identity in inference; in training, noise keyed on the global
// position (a batch forwarded in two offset slices draws what it draws whole), a new draw per
// step, the noise's statistics, whole channels dropped together, and float64 finite-difference
// gradients with the noise held fixed (the same step and offset); ActivityRegularization's
// penalty and its gradient divided by the global rows; configs and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "mdtrain/nn/activity_regularization.h"
#include "mdtrain/nn/gaussian_dropout.h"
#include "mdtrain/nn/gaussian_noise.h"
#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/spatial_dropout.h"
#include "mdtrain/ops/noise.h"

namespace mdtrain {
namespace {

using testing::check_layer_gradients;
using testing::dot;
using testing::expect_close;
using testing::numeric_gradient;
using testing::random_tensor;

ForwardContext training(std::uint64_t step, std::int64_t offset = 0, std::int64_t global_rows = 0) {
  ForwardContext ctx;
  ctx.training = true;
  ctx.step = step;
  ctx.global_row_offset = offset;
  ctx.global_rows = global_rows;
  return ctx;
}

// Each noise layer, built float64 for its input shape.
struct Case {
  std::string name;
  std::shared_ptr<Layer> layer;
  Shape shape;
};

std::vector<Case> noise_cases() {
  std::vector<Case> cases = {
      {"GaussianNoise", std::make_shared<GaussianNoise>("gn", 0.3, 11), {6}},
      {"GaussianDropout", std::make_shared<GaussianDropout>("gd", 0.4, 12), {6}},
      {"SpatialDropout1D", std::make_shared<SpatialDropout>("sd1", 1, 0.5, 13), {5, 4}},
      {"SpatialDropout2D", std::make_shared<SpatialDropout>("sd2", 2, 0.25, 14), {3, 4, 2}},
  };
  for (auto& c : cases) c.layer->build(c.shape, 0, DType::Float64);
  return cases;
}

Shape batched(std::int64_t batch, const Shape& s) {
  Shape out{batch};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

std::vector<double> values_of(const Tensor& t) {
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

TEST(NoiseLayers, AreTheIdentityInInference) {
  std::mt19937_64 rng(1);
  for (auto& c : noise_cases()) {
    const Tensor x = random_tensor(batched(4, c.shape), rng);
    const Tensor y = c.layer->forward(x, ForwardContext{});
    EXPECT_EQ(y.raw(), x.raw()) << c.name;  // no copy
    EXPECT_EQ(c.layer->backward(x, true).raw(), x.raw()) << c.name;
  }
}

TEST(NoiseLayers, DrawOnTheGlobalPositionSoSlicesDrawWhatTheBatchDraws) {
  std::mt19937_64 rng(2);
  for (auto& c : noise_cases()) {
    const Tensor x = random_tensor(batched(7, c.shape), rng);
    const std::vector<double> whole = values_of(c.layer->forward(x, training(5)));
    // Rows [0, 3) and [3, 7) as two replicas would run them.
    auto replica = c.layer->clone();
    std::vector<double> sliced = values_of(replica->forward(x.rows(0, 3), training(5, 0)));
    const std::vector<double> rest = values_of(replica->forward(x.rows(3, 7), training(5, 3)));
    sliced.insert(sliced.end(), rest.begin(), rest.end());
    EXPECT_EQ(sliced, whole) << c.name;                                       // bitwise
    EXPECT_NE(values_of(c.layer->forward(x, training(6))), whole) << c.name;  // another step, another draw
    EXPECT_NE(whole, values_of(x)) << c.name;
  }
}

TEST(NoiseLayers, GradientsMatchFiniteDifferencesWithTheNoiseHeldFixed) {
  std::mt19937_64 rng(3);
  for (auto& c : noise_cases()) {
    SCOPED_TRACE(c.name);
    check_layer_gradients(*c.layer, random_tensor(batched(3, c.shape), rng), training(9, 4), 21);
  }
}

TEST(NoiseOps, NormalsHaveZeroMeanAndUnitVarianceAndDropoutMasksTheRate) {
  const std::int64_t n = 200000;
  Tensor x({n}, DType::Float64), y({n}, DType::Float64), m({n}, DType::Float64);
  x.fill(0.0);
  ops::gaussian_noise(x, 1.0, 3, 1, 12345, y);
  double mean = 0, var = 0;
  for (double v : values_of(y)) mean += v / n;
  for (double v : values_of(y)) var += (v - mean) * (v - mean) / n;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.01);
  x.fill(1.0);
  ops::gaussian_dropout(x, 0.5, 3, 1, 0, m, y);
  EXPECT_EQ(values_of(m), values_of(y));  // y = 1 * multiplier
  mean = 0;
  for (double v : values_of(m)) mean += v / n;
  EXPECT_NEAR(mean, 1.0, 0.01);
  ops::dropout_mask(0.3, 3, 1, 0, m);
  std::int64_t dropped = 0;
  for (double v : values_of(m)) {
    if (v == 0) ++dropped;
    else EXPECT_DOUBLE_EQ(v, 1.0 / 0.7);
  }
  EXPECT_NEAR(static_cast<double>(dropped) / n, 0.3, 0.005);
}

TEST(SpatialDropoutLayer, DropsWholeChannelsOfEachExample) {
  SpatialDropout layer("sd", 2, 0.5, 3);
  layer.build({3, 4, 6}, 0, DType::Float64);
  Tensor x(batched(40, {3, 4, 6}), DType::Float64);
  x.fill(1.0);
  const Tensor y = layer.forward(x, training(1));
  int kept = 0;
  for (std::int64_t r = 0; r < 40; ++r)
    for (std::int64_t ch = 0; ch < 6; ++ch) {
      const double first = y.data<double>()[r * 72 + ch];
      EXPECT_TRUE(first == 0.0 || first == 2.0);
      kept += first != 0.0;
      for (std::int64_t p = 1; p < 12; ++p) ASSERT_EQ(y.data<double>()[r * 72 + p * 6 + ch], first);
    }
  EXPECT_GT(kept, 80);
  EXPECT_LT(kept, 160);
}

TEST(ActivityRegularizationLayer, AddsThePenaltyAndItsGradientOverTheGlobalRows) {
  std::mt19937_64 rng(4);
  ActivityRegularization layer("ar", 0.1, 0.3);
  layer.build({5}, 0, DType::Float64);
  Tensor x = random_tensor({3, 5}, rng);
  x.data<double>()[2] = 0.0;  // sign(0) = 0: |x|'s gradient there is 0, as TF's
  const ForwardContext ctx = training(0, 2, /*global_rows=*/8);
  const Tensor G = random_tensor({3, 5}, rng);
  EXPECT_EQ(layer.forward(x, ctx).raw(), x.raw());
  double penalty = 0;
  for (double v : values_of(x)) penalty += 0.1 * std::fabs(v) + 0.3 * v * v;
  EXPECT_NEAR(layer.activity_loss(), penalty, 1e-14);
  EXPECT_TRUE(layer.adds_activity_loss());
  Tensor dx = layer.backward(G, true).clone();
  auto loss = [&] {
    const double fit = dot(G, layer.forward(x, ctx));
    return fit + layer.activity_loss() / 8;
  };
  // The kink at 0: the one-sided differences average to 0 there, as sign(0) does.
  expect_close(dx, numeric_gradient(x, loss), "dL/dx");
  // Inference: the penalty still counts (evaluate's loss); nothing to divide by is needed.
  layer.forward(x, ForwardContext{});
  EXPECT_NEAR(layer.activity_loss(), penalty, 1e-14);
}

TEST(ActivityRegularizationLayer, RefusesATrainingForwardWithoutTheGlobalRows) {
  ActivityRegularization layer("ar", 0.0, 0.3);
  layer.build({2}, 0, DType::Float64);
  Tensor x({1, 2}, DType::Float64);
  x.fill(1.0);
  try {
    layer.forward(x, training(0));
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"ar\""), std::string::npos) << e.what();
  }
  ActivityRegularization none("none", 0.0, 0.0);  // no penalty: nothing to lose
  none.build({2}, 0, DType::Float64);
  EXPECT_FALSE(none.adds_activity_loss());
  EXPECT_NO_THROW(none.forward(x, training(0)));
}

TEST(NoiseLayers, RefuseKerassBadArgumentsNamingTheLayer) {
  const auto message = [](const std::string& cls, const std::string& config) {
    try {
      layer_from_config(Json::parse(R"({"class_name": ")" + cls + R"(", "config": {"name": "bad", )" + config + "}}"));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  EXPECT_NE(message("GaussianNoise", R"("stddev": 1.5)").find("between 0 and 1"), std::string::npos);
  EXPECT_NE(message("GaussianDropout", R"("rate": 1.0)").find("infinite standard deviation"), std::string::npos);
  EXPECT_NE(message("SpatialDropout1D", R"("rate": -0.5)").find("between 0 and 1"), std::string::npos);
  EXPECT_NE(message("SpatialDropout2D", R"("rate": 0.5, "data_format": "channels_first")").find("not supported"),
            std::string::npos);
  EXPECT_NE(message("GaussianNoise", R"("stddev": 0.1, "seed": -3)").find("seed"), std::string::npos);
  EXPECT_NE(message("ActivityRegularization", R"("l1": -1)").find("non-negative"), std::string::npos);
  EXPECT_NE(message("GaussianNoise", R"("stddev": 1.5)").find("\"bad\""), std::string::npos);
  // Keras's null seed and l2 read as 0.
  EXPECT_EQ(message("GaussianNoise", R"("stddev": 0.1, "seed": null)"), "no throw");
  EXPECT_EQ(message("ActivityRegularization", R"("l1": 0.1, "l2": null)"), "no throw");
  SpatialDropout one("sd", 1, 0.1, 0);
  EXPECT_THROW(one.build({4}, 0), std::invalid_argument);  // expected ndim=3
  EXPECT_FALSE(one.config().contains("trainable"));        // Keras's SpatialDropout config has none
}

}  // namespace
}  // namespace mdtrain
