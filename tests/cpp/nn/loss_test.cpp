// Losses against Keras 3's formulas written out independently here, finite-difference gradient
// checks in float64, and the validation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/nn/loss.h"
#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/ops/loss_ops.h"

namespace mdtrain {
namespace {

using losses::BinaryCrossentropy;
using losses::CategoricalCrossentropy;
using losses::MeanAbsoluteError;
using losses::MeanSquaredError;
using losses::SparseCategoricalCrossentropy;

constexpr double kEps = 1e-7;  // keras.backend.epsilon()

Tensor make(Shape shape, const std::vector<double>& v, DType dtype = DType::Float64) {
  Tensor t(std::move(shape), dtype);
  EXPECT_EQ(static_cast<std::size_t>(t.numel()), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::Float32: t.data<float>()[i] = static_cast<float>(v[i]); break;
      case DType::Float64: t.data<double>()[i] = v[i]; break;
      case DType::Int32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v[i]); break;
      case DType::Int64: t.data<std::int64_t>()[i] = static_cast<std::int64_t>(v[i]); break;
      case DType::UInt8: t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v[i]); break;
    }
  }
  return t;
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = t.dtype() == DType::Float32 ? t.data<float>()[i] : t.data<double>()[i];
  return v;
}

double clip(double p) { return std::min(std::max(p, kEps), 1.0 - kEps); }

std::vector<double> uniform(std::mt19937_64& rng, std::size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument";
  return "";
}

// ---- values against Keras's formulas -----------------------------------------------------------

TEST(SparseCategoricalCrossentropy, ProbabilitiesMatchKerasDocExample) {
  // keras.losses.sparse_categorical_crossentropy([1, 2], [[0.05, 0.95, 0], [0.1, 0.8, 0.1]])
  // -> [0.0513, 2.303]. TF computes -log(clip(p_y)) + log(sum_j clip(p_j)).
  const std::vector<double> p = {0.05, 0.95, 0.0, 0.1, 0.8, 0.1};
  const double row0 = -std::log(0.95) + std::log(0.05 + 0.95 + kEps);
  const double row1 = -std::log(0.1) + std::log(0.1 + 0.8 + 0.1);
  SparseCategoricalCrossentropy loss;
  for (DType labels_dtype : {DType::Int32, DType::Int64, DType::Float32, DType::UInt8}) {
    Tensor y = make({2}, {1, 2}, labels_dtype);
    double sum = loss.forward_backward(y, make({2, 3}, p), 1.0, nullptr);
    EXPECT_NEAR(sum, row0 + row1, 1e-12) << name_of(labels_dtype);
  }
  EXPECT_NEAR(row0, 0.0513, 5e-4);
  EXPECT_NEAR(row1, 2.303, 5e-4);
  // float32 predictions, (batch, 1) labels.
  double sum32 =
      loss.forward_backward(make({2, 1}, {1, 2}, DType::Float32), make({2, 3}, p, DType::Float32), 1.0, nullptr);
  EXPECT_NEAR(sum32, row0 + row1, 1e-5);
  EXPECT_NEAR(loss.mean(make({2}, {1, 2}), make({2, 3}, p)), (row0 + row1) / 2, 1e-12);
}

TEST(SparseCategoricalCrossentropy, LogitsAreLogSoftmax) {
  const std::vector<double> x = {1.0, -2.0, 0.5, 3.0, 0.25, 0.0, -1.0, 2.0};
  const std::vector<int> labels = {3, 0};
  double expected = 0.0;
  for (int r = 0; r < 2; ++r) {
    double z = 0.0;
    for (int j = 0; j < 4; ++j) z += std::exp(x[r * 4 + j]);
    expected += -std::log(std::exp(x[r * 4 + labels[r]]) / z);
  }
  SparseCategoricalCrossentropy loss(/*from_logits=*/true);
  EXPECT_NEAR(loss.forward_backward(make({2}, {3, 0}, DType::Int32), make({2, 4}, x), 1.0, nullptr), expected, 1e-12);
  EXPECT_NEAR(loss.forward_backward(make({2}, {3, 0}, DType::Int32), make({2, 4}, x, DType::Float32), 1.0, nullptr),
              expected, 1e-5);
}

TEST(SparseCategoricalCrossentropy, LogitsAreStableForHugeValues) {
  SparseCategoricalCrossentropy loss(true);
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor g;
    double v = loss.forward_backward(make({1}, {1}, DType::Int32), make({1, 3}, {1000, 0, -1000}, dt), 1.0, &g);
    EXPECT_NEAR(v, 1000.0, 1e-3) << name_of(dt);
    auto gv = values(g);
    EXPECT_NEAR(gv[0], 1.0, 1e-6);
    EXPECT_NEAR(gv[1], -1.0, 1e-6);
    EXPECT_EQ(gv[2], 0.0);
  }
}

TEST(SparseCategoricalCrossentropy, ClippedProbabilityHasZeroGradient) {
  // p_0 = 1e-9 is clipped to 1e-7: no gradient flows through it (autodiff of clip).
  SparseCategoricalCrossentropy loss;
  Tensor g;
  double v = loss.forward_backward(make({1}, {0}, DType::Int32), make({1, 3}, {1e-9, 0.5, 0.5}), 1.0, &g);
  EXPECT_NEAR(v, -std::log(kEps) + std::log(kEps + 1.0), 1e-12);
  auto gv = values(g);
  EXPECT_EQ(gv[0], 0.0);
  EXPECT_NEAR(gv[1], 1.0 / (1.0 + kEps), 1e-15);
  EXPECT_NEAR(gv[2], 1.0 / (1.0 + kEps), 1e-15);
}

TEST(SparseCategoricalCrossentropy, IgnoreClassDropsSamplesFromSumAndCount) {
  const std::vector<double> x = {0.3, 1.0, -0.5, 2.0, 0.1, 0.0, -1.0, 0.7, 0.2};
  SparseCategoricalCrossentropy plain(true), ignoring(true, -1);
  Tensor labels = make({3}, {0, -1, 2}, DType::Int64);
  Tensor g;
  double sum = ignoring.forward_backward(labels, make({3, 3}, x), 0.5, &g);
  double row0 = plain.forward_backward(make({1}, {0}, DType::Int64), make({1, 3}, {0.3, 1.0, -0.5}), 1.0, nullptr);
  double row2 = plain.forward_backward(make({1}, {2}, DType::Int64), make({1, 3}, {-1.0, 0.7, 0.2}), 1.0, nullptr);
  EXPECT_NEAR(sum, row0 + row2, 1e-12);
  EXPECT_EQ(ignoring.sample_count(labels, make({3, 3}, x)), 2);
  EXPECT_EQ(plain.sample_count(make({3}, {0, 1, 2}), make({3, 3}, x)), 3);
  auto gv = values(g);
  for (int j = 3; j < 6; ++j) EXPECT_EQ(gv[j], 0.0);
  EXPECT_NEAR(ignoring.mean(labels, make({3, 3}, x)), (row0 + row2) / 2, 1e-12);
  // Every label ignored: Keras's divide_no_nan gives 0.
  Tensor all_ignored = make({2}, {-1, -1}, DType::Int64);
  EXPECT_EQ(ignoring.mean(all_ignored, make({2, 3}, {1, 2, 3, 4, 5, 6})), 0.0);
}

TEST(CategoricalCrossentropy, ProbabilitiesAreRenormalisedThenClipped) {
  // Keras doc example: categorical_crossentropy([[0,1,0],[0,0,1]], [[0.05,0.95,0],[0.1,0.8,0.1]]).
  CategoricalCrossentropy loss;
  double sum = loss.forward_backward(make({2, 3}, {0, 1, 0, 0, 0, 1}), make({2, 3}, {0.05, 0.95, 0, 0.1, 0.8, 0.1}),
                                     1.0, nullptr);
  EXPECT_NEAR(sum, -std::log(0.95) - std::log(0.1), 1e-12);
  EXPECT_NEAR(-std::log(0.95), 0.0513, 5e-4);
  // Unnormalised "probabilities" (sum 1.2) are divided by their sum first.
  EXPECT_NEAR(loss.forward_backward(make({1, 3}, {0, 1, 0}), make({1, 3}, {0.2, 0.6, 0.4}), 1.0, nullptr),
              -std::log(0.5), 1e-12);
  // A zero probability for the target class is clipped to epsilon, and no gradient flows.
  Tensor g;
  EXPECT_NEAR(loss.forward_backward(make({1, 3}, {1, 0, 0}), make({1, 3}, {0.0, 0.5, 0.5}), 1.0, &g), -std::log(kEps),
              1e-9);
  for (double v : values(g)) EXPECT_EQ(v, 0.0);
}

TEST(CategoricalCrossentropy, LabelSmoothing) {
  const double s = 0.1;
  const std::vector<double> t = {0, 1, 0, 1, 0, 0};
  const std::vector<double> p = {0.2, 0.7, 0.1, 0.3, 0.3, 0.4};
  const std::vector<double> x = {0.5, 2.0, -1.0, 0.0, 1.5, 0.25};
  double expected_p = 0.0, expected_x = 0.0;
  for (int r = 0; r < 2; ++r) {
    double total = 0.0, z = 0.0;
    for (int j = 0; j < 3; ++j) total += p[r * 3 + j], z += std::exp(x[r * 3 + j]);
    for (int j = 0; j < 3; ++j) {
      double ts = t[r * 3 + j] * (1 - s) + s / 3;
      expected_p -= ts * std::log(clip(p[r * 3 + j] / total));
      expected_x -= ts * (x[r * 3 + j] - std::log(z));
    }
  }
  EXPECT_NEAR(CategoricalCrossentropy(false, s).forward_backward(make({2, 3}, t), make({2, 3}, p), 1.0, nullptr),
              expected_p, 1e-12);
  EXPECT_NEAR(CategoricalCrossentropy(true, s).forward_backward(make({2, 3}, t), make({2, 3}, x), 1.0, nullptr),
              expected_x, 1e-12);
}

TEST(BinaryCrossentropy, ProbabilitiesMatchKerasDocExample) {
  // keras.losses.binary_crossentropy([[0,1],[0,0]], [[0.6,0.4],[0.4,0.6]]) -> [0.916, 0.714].
  auto bce = [](double t, double p) { return -(t * std::log(clip(p)) + (1 - t) * std::log(1 - clip(p))); };
  const double row0 = (bce(0, 0.6) + bce(1, 0.4)) / 2, row1 = (bce(0, 0.4) + bce(0, 0.6)) / 2;
  EXPECT_NEAR(row0, 0.916, 5e-4);
  EXPECT_NEAR(row1, 0.714, 5e-4);
  BinaryCrossentropy loss;
  EXPECT_NEAR(loss.forward_backward(make({2, 2}, {0, 1, 0, 0}), make({2, 2}, {0.6, 0.4, 0.4, 0.6}), 1.0, nullptr),
              row0 + row1, 1e-12);
  EXPECT_NEAR(loss.forward_backward(make({2, 2}, {0, 1, 0, 0}, DType::Int32),
                                    make({2, 2}, {0.6, 0.4, 0.4, 0.6}, DType::Float32), 1.0, nullptr),
              row0 + row1, 1e-6);
}

TEST(BinaryCrossentropy, LogitsEqualProbabilitiesOfTheSigmoidAndStayFinite) {
  const std::vector<double> x = {-3.0, -0.5, 0.0, 0.7, 2.5, 4.0};
  const std::vector<double> t = {0, 1, 1, 0, 1, 0.3};
  std::vector<double> p(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) p[i] = 1 / (1 + std::exp(-x[i]));
  for (double s : {0.0, 0.2}) {
    double from_logits = BinaryCrossentropy(true, s).forward_backward(make({3, 2}, t), make({3, 2}, x), 1.0, nullptr);
    double from_probs = BinaryCrossentropy(false, s).forward_backward(make({3, 2}, t), make({3, 2}, p), 1.0, nullptr);
    EXPECT_NEAR(from_logits, from_probs, 1e-9) << "smoothing " << s;
  }
  Tensor g;
  double v = BinaryCrossentropy(true).forward_backward(make({2, 1}, {0, 1}), make({2, 1}, {800, 800}), 1.0, &g);
  EXPECT_NEAR(v, 800.0, 1e-9);
  EXPECT_NEAR(values(g)[0], 1.0, 1e-12);
  EXPECT_NEAR(values(g)[1], 0.0, 1e-12);
}

TEST(BinaryCrossentropy, LabelSmoothingAndClipping) {
  const double s = 0.2;
  // Targets squeezed toward 0.5: t * (1 - s) + 0.5 * s. y_true (2,) against y_pred (2, 1).
  const double t0 = 0 * (1 - s) + 0.5 * s, t1 = 1 * (1 - s) + 0.5 * s;
  const double expected =
      -(t0 * std::log(0.3) + (1 - t0) * std::log(0.7)) - (t1 * std::log(0.9) + (1 - t1) * std::log(0.1));
  EXPECT_NEAR(BinaryCrossentropy(false, s).forward_backward(make({2}, {0, 1}, DType::Int32), make({2, 1}, {0.3, 0.9}),
                                                            1.0, nullptr),
              expected, 1e-12);
  // p = 0 with target 1 and p = 1 with target 0 clip to epsilon: -log(1e-7), zero gradient.
  Tensor g;
  double v = BinaryCrossentropy().forward_backward(make({2, 1}, {1, 0}), make({2, 1}, {0.0, 1.0}), 1.0, &g);
  EXPECT_NEAR(v, -std::log(kEps) - std::log(1 - (1 - kEps)), 1e-6);
  EXPECT_EQ(values(g)[0], 0.0);
  EXPECT_EQ(values(g)[1], 0.0);
}

TEST(MeanSquaredAndAbsoluteError, PerSampleMeanOverLastAxis) {
  // Keras doc example shapes: per sample the mean over the last axis.
  Tensor t = make({2, 2}, {0, 1, 0, 0}), p = make({2, 2}, {1, 1, 1, 0});
  EXPECT_DOUBLE_EQ(MeanSquaredError().forward_backward(t, p, 1.0, nullptr), 0.5 + 0.5);
  EXPECT_DOUBLE_EQ(MeanAbsoluteError().forward_backward(t, make({2, 2}, {0.5, -1, 2, 0}), 1.0, nullptr),
                   (0.5 + 2) / 2 + (2 + 0) / 2);
  EXPECT_DOUBLE_EQ(MeanSquaredError().mean(t, p), 0.5);
  // y_true (3,) against y_pred (3, 1): y_true is expanded, three samples.
  EXPECT_DOUBLE_EQ(MeanSquaredError().forward_backward(make({3}, {1, 2, 3}, DType::Int32), make({3, 1}, {1, 0, 5}), 1.0,
                                                       nullptr),
                   0 + 4 + 4);
  // y_true (2, 3) against y_pred (2, 3, 1): y_pred is squeezed; per sample the mean over 3.
  MeanSquaredError mse;
  Tensor t3 = make({2, 3}, {0, 0, 0, 1, 1, 1}), p3 = make({2, 3, 1}, {1, 2, 3, 1, 1, 4});
  EXPECT_DOUBLE_EQ(mse.forward_backward(t3, p3, 1.0, nullptr), (1 + 4 + 9) / 3.0 + 9 / 3.0);
  EXPECT_EQ(mse.sample_count(t3, p3), 2);
  // Rank 3 with a real feature axis: every (batch, time) position is one loss value.
  EXPECT_EQ(mse.sample_count(make({2, 3, 2}, std::vector<double>(12, 0)), make({2, 3, 2}, std::vector<double>(12, 0))),
            6);
}

// ---- gradients --------------------------------------------------------------------------------

struct GradCase {
  std::string label;
  std::function<std::unique_ptr<Loss>()> loss;
  // Builds (y_true, y_pred) for a batch.
  std::function<std::pair<Tensor, Tensor>(std::mt19937_64&, std::int64_t batch)> inputs;
};

std::pair<Tensor, Tensor> sparse_inputs(std::mt19937_64& rng, std::int64_t b, bool logits, bool ignore) {
  const std::int64_t c = 5;
  std::vector<double> labels(b);
  std::uniform_int_distribution<int> cls(0, c - 1);
  for (auto& l : labels) l = cls(rng);
  if (ignore && b > 1) labels[1] = -1;
  auto p = logits ? uniform(rng, b * c, -3, 3) : uniform(rng, b * c, 0.05, 0.95);
  return {make({b}, labels, DType::Int32), make({b, c}, p)};
}

std::pair<Tensor, Tensor> dense_inputs(std::mt19937_64& rng, std::int64_t b, bool logits, bool one_hot) {
  const std::int64_t c = 4;
  std::vector<double> t(b * c, 0.0);
  if (one_hot) {
    std::uniform_int_distribution<int> cls(0, c - 1);
    for (std::int64_t i = 0; i < b; ++i) t[i * c + cls(rng)] = 1.0;
  } else {
    t = uniform(rng, b * c, 0.0, 1.0);  // soft targets that need not sum to one
  }
  auto p = logits ? uniform(rng, b * c, -3, 3) : uniform(rng, b * c, 0.05, 0.95);
  return {make({b, c}, t), make({b, c}, p)};
}

std::pair<Tensor, Tensor> regression_inputs(std::mt19937_64& rng, std::int64_t b) {
  const std::int64_t c = 3;
  auto t = uniform(rng, b * c, -2, 2);
  auto off = uniform(rng, b * c, 0.1, 1.0);  // |pred - true| >= 0.1: away from abs's kink
  std::vector<double> p(t.size());
  for (std::size_t i = 0; i < t.size(); ++i) p[i] = t[i] + (i % 2 ? off[i] : -off[i]);
  return {make({b, c}, t), make({b, c}, p)};
}

std::vector<GradCase> grad_cases() {
  std::vector<GradCase> cases;
  for (bool logits : {false, true}) {
    const std::string kind = logits ? "logits" : "probs";
    cases.push_back({"scce_" + kind, [=] { return std::make_unique<SparseCategoricalCrossentropy>(logits); },
                     [=](std::mt19937_64& r, std::int64_t b) { return sparse_inputs(r, b, logits, false); }});
    cases.push_back({"scce_ignore_" + kind, [=] { return std::make_unique<SparseCategoricalCrossentropy>(logits, -1); },
                     [=](std::mt19937_64& r, std::int64_t b) { return sparse_inputs(r, b, logits, true); }});
    for (double s : {0.0, 0.15}) {
      const std::string tag = kind + "_ls" + std::to_string(s);
      cases.push_back({"cce_onehot_" + tag, [=] { return std::make_unique<CategoricalCrossentropy>(logits, s); },
                       [=](std::mt19937_64& r, std::int64_t b) { return dense_inputs(r, b, logits, true); }});
      cases.push_back({"cce_soft_" + tag, [=] { return std::make_unique<CategoricalCrossentropy>(logits, s); },
                       [=](std::mt19937_64& r, std::int64_t b) { return dense_inputs(r, b, logits, false); }});
      cases.push_back({"bce_" + tag, [=] { return std::make_unique<BinaryCrossentropy>(logits, s); },
                       [=](std::mt19937_64& r, std::int64_t b) { return dense_inputs(r, b, logits, false); }});
    }
  }
  cases.push_back({"mse", [] { return std::make_unique<MeanSquaredError>(); },
                   [](std::mt19937_64& r, std::int64_t b) { return regression_inputs(r, b); }});
  cases.push_back({"mae", [] { return std::make_unique<MeanAbsoluteError>(); },
                   [](std::mt19937_64& r, std::int64_t b) { return regression_inputs(r, b); }});
  return cases;
}

TEST(LossGradients, MatchCentralDifferencesInFloat64) {
  std::mt19937_64 rng(1234);
  int checked = 0;
  for (const auto& c : grad_cases()) {
    auto loss = c.loss();
    for (std::int64_t batch : {1, 5}) {
      for (double scale : {1.0, 0.37}) {
        auto [y_true, y_pred] = c.inputs(rng, batch);
        Tensor g;
        const double sum = loss->forward_backward(y_true, y_pred, scale, &g);
        ASSERT_TRUE(std::isfinite(sum)) << c.label;
        ASSERT_EQ(g.shape(), y_pred.shape());
        const auto analytic = values(g);
        double* x = y_pred.data<double>();
        const double h = 1e-6;
        for (std::int64_t i = 0; i < y_pred.numel(); ++i) {
          const double saved = x[i];
          x[i] = saved + h;
          const double up = loss->forward_backward(y_true, y_pred, 1.0, nullptr);
          x[i] = saved - h;
          const double down = loss->forward_backward(y_true, y_pred, 1.0, nullptr);
          x[i] = saved;
          const double numeric = scale * (up - down) / (2 * h);
          const double tol = 1e-6 * std::max({std::fabs(numeric), std::fabs(analytic[i]), 1e-3});
          EXPECT_NEAR(analytic[i], numeric, tol)
              << c.label << " batch " << batch << " scale " << scale << " element " << i;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
}

TEST(LossGradients, Float32AgreesWithFloat64) {
  std::mt19937_64 rng(99);
  for (const auto& c : grad_cases()) {
    auto loss = c.loss();
    auto [y_true, y_pred] = c.inputs(rng, 6);
    Tensor pred32(y_pred.shape(), DType::Float32);
    for (std::int64_t i = 0; i < y_pred.numel(); ++i) {
      pred32.data<float>()[i] = static_cast<float>(y_pred.data<double>()[i]);
      y_pred.data<double>()[i] = pred32.data<float>()[i];  // same inputs in both precisions
    }
    Tensor g64, g32;
    const double v64 = loss->forward_backward(y_true, y_pred, 0.25, &g64);
    const double v32 = loss->forward_backward(y_true, pred32, 0.25, &g32);
    EXPECT_EQ(g32.dtype(), DType::Float32);
    EXPECT_NEAR(v32, v64, 1e-5 * std::max(1.0, std::fabs(v64))) << c.label;
    auto a = values(g64), b = values(g32);
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 2e-6) << c.label << " element " << i;
  }
}

TEST(LossGradients, SplitBatchesAddUpToTheWholeBatch) {
  // Data parallelism: replicas hold rows [0, 3) and [3, 7) of a global batch of 7, each scaling by
  // 1/7. Their sums add to the whole batch's and their gradients are the whole batch's rows.
  std::mt19937_64 rng(7);
  for (const auto& c : grad_cases()) {
    auto loss = c.loss();
    auto [y_true, y_pred] = c.inputs(rng, 7);
    const double scale = 1.0 / static_cast<double>(loss->sample_count(y_true, y_pred));
    Tensor g_all, g_a, g_b;
    const double all = loss->forward_backward(y_true, y_pred, scale, &g_all);
    const double a = loss->forward_backward(y_true.rows(0, 3), y_pred.rows(0, 3), scale, &g_a);
    const double b = loss->forward_backward(y_true.rows(3, 7), y_pred.rows(3, 7), scale, &g_b);
    EXPECT_NEAR(a + b, all, 1e-12 * std::max(1.0, std::fabs(all))) << c.label;
    EXPECT_EQ(loss->sample_count(y_true.rows(0, 3), y_pred.rows(0, 3)) +
                  loss->sample_count(y_true.rows(3, 7), y_pred.rows(3, 7)),
              loss->sample_count(y_true, y_pred));
    auto whole = values(g_all), ga = values(g_a), gb = values(g_b);
    ga.insert(ga.end(), gb.begin(), gb.end());
    ASSERT_EQ(ga.size(), whole.size());
    for (std::size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(ga[i], whole[i]) << c.label;
    EXPECT_NEAR(loss->mean(y_true, y_pred), all * scale, 1e-12 * std::max(1.0, std::fabs(all)));
  }
}

TEST(LossGradients, ReusesACallersBufferAndHandlesEmptyBatches) {
  SparseCategoricalCrossentropy loss(true);
  Tensor y = make({2}, {0, 1}, DType::Int32), p = make({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor g(p.shape(), DType::Float64);
  const void* before = g.raw();
  loss.forward_backward(y, p, 1.0, &g);
  EXPECT_EQ(g.raw(), before);
  Tensor empty_g;
  EXPECT_EQ(loss.forward_backward(make({0}, {}, DType::Int32), Tensor({0, 3}, DType::Float64), 1.0, &empty_g), 0.0);
  EXPECT_EQ(empty_g.shape(), (Shape{0, 3}));
  EXPECT_EQ(MeanSquaredError().mean(Tensor({0, 2}, DType::Float64), Tensor({0, 2}, DType::Float64)), 0.0);
}

// ---- validation --------------------------------------------------------------------------------

TEST(LossValidation, LabelOutOfRangeNamesLossLabelAndShapes) {
  SparseCategoricalCrossentropy loss(true);
  std::vector<double> labels(32, 1.0);
  labels[3] = 12;
  const std::string msg = message_of([&] {
    loss.validate(make({32}, labels, DType::Int32), Tensor({32, 10}, DType::Float32));
  });
  EXPECT_NE(msg.find("[loss] sparse_categorical_crossentropy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("label 12 at index 3 is out of range for 10 classes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(32, 10)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(32,)"), std::string::npos) << msg;
  // forward_backward validates too (it never reads out of bounds).
  labels[3] = -1;
  const std::string neg = message_of([&] {
    Tensor g;
    loss.forward_backward(make({32}, labels, DType::Int64), Tensor::zeros({32, 10}, DType::Float32), 1.0, &g);
  });
  EXPECT_NE(neg.find("label -1 at index 3"), std::string::npos) << neg;
  // -1 is fine once it is the ignored class, but 10 is not.
  SparseCategoricalCrossentropy ignoring(true, -1);
  EXPECT_NO_THROW(ignoring.validate(make({32}, labels, DType::Int64), Tensor({32, 10}, DType::Float32)));
  labels[5] = 10;
  EXPECT_NE(message_of([&] {
              ignoring.validate(make({32}, labels, DType::Int64), Tensor({32, 10}));
            }).find("label 10 at index 5"),
            std::string::npos);
}

TEST(LossValidation, FractionalFloatLabelsAreRejected) {
  SparseCategoricalCrossentropy loss;
  const std::string msg = message_of([&] {
    loss.validate(make({3}, {0, 2.5, 1}, DType::Float32), Tensor({3, 4}, DType::Float32));
  });
  EXPECT_NE(msg.find("label 2.5 at index 1 is not an integer class id"), std::string::npos) << msg;
  EXPECT_NO_THROW(loss.validate(make({3}, {0, 3, 1}, DType::Float32), Tensor({3, 4}, DType::Float32)));
}

TEST(LossValidation, BatchMismatchAndWrongShapesNameBothShapes) {
  const std::string batch = message_of([] {
    SparseCategoricalCrossentropy().validate(make({31}, std::vector<double>(31, 0), DType::Int32),
                                             Tensor({32, 10}, DType::Float32));
  });
  EXPECT_NE(batch.find("[loss] sparse_categorical_crossentropy"), std::string::npos) << batch;
  EXPECT_NE(batch.find("batch size 31"), std::string::npos) << batch;
  EXPECT_NE(batch.find("(31,)"), std::string::npos) << batch;
  EXPECT_NE(batch.find("(32, 10)"), std::string::npos) << batch;

  const std::string cce = message_of([] {
    CategoricalCrossentropy().validate(Tensor({32}, DType::Int32), Tensor({32, 10}, DType::Float32));
  });
  EXPECT_NE(cce.find(
                "[loss] categorical_crossentropy: y_true shape (32,) is not compatible with y_pred shape (32, 10)"),
            std::string::npos)
      << cce;
  EXPECT_NE(cce.find("sparse_categorical_crossentropy"), std::string::npos) << cce;

  const std::string mse = message_of([] {
    MeanSquaredError().forward_backward(Tensor({8, 3}), Tensor({8, 2}), 1.0, nullptr);
  });
  EXPECT_NE(mse.find("[loss] mean_squared_error: y_true shape (8, 3) is not compatible with y_pred shape (8, 2)"),
            std::string::npos)
      << mse;

  const std::string rank = message_of(
      [] { SparseCategoricalCrossentropy().validate(Tensor({8}, DType::Int32), Tensor({8}, DType::Float32)); });
  EXPECT_NE(rank.find("(batch, ..., classes)"), std::string::npos) << rank;
  EXPECT_NE(rank.find("y_pred shape (8,)"), std::string::npos) << rank;

  const std::string onehot = message_of([] {
    SparseCategoricalCrossentropy().validate(Tensor({8, 10}), Tensor({8, 10}));
  });
  EXPECT_NE(onehot.find("categorical_crossentropy"), std::string::npos) << onehot;

  const std::string dtype = message_of([] {
    MeanSquaredError().validate(Tensor({4, 1}), Tensor({4, 1}, DType::Int32));
  });
  EXPECT_NE(dtype.find("y_pred must be float32 or float64"), std::string::npos) << dtype;

  EXPECT_THROW(CategoricalCrossentropy(false, 1.5), std::invalid_argument);
  EXPECT_THROW(BinaryCrossentropy(false, -0.1), std::invalid_argument);
}

TEST(LossValidation, GradientMustNotAliasPredictions) {
  Tensor p = make({2, 2}, {0.2, 0.8, 0.6, 0.4});
  Tensor alias = p;
  EXPECT_THROW(BinaryCrossentropy().forward_backward(make({2, 2}, {0, 1, 1, 0}), p, 1.0, &alias),
               std::invalid_argument);
}

TEST(LossValidation, CudaTensorsAreRejectedByTheOps) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present: GPU losses are tested in tests/cpp/gpu";
  std::vector<double> host(6, 0.5);
  Device gpu{DeviceKind::CUDA, 0};
  Tensor p = Tensor::wrap(host.data(), {3, 2}, DType::Float64, nullptr, gpu);
  Tensor t = Tensor::wrap(host.data(), {3, 2}, DType::Float64, nullptr, gpu);
  const std::string msg = message_of([&] { MeanSquaredError().forward_backward(t, p, 1.0, nullptr); });
  EXPECT_NE(msg.find("[ops]"), std::string::npos) << msg;
  // No GPU here (or a CPU-only build): the op names the device and why it cannot be used.
  EXPECT_NE(msg.find("is on /device:GPU:0: "), std::string::npos) << msg;
  EXPECT_THROW(ops::sparse_categorical_crossentropy(make({3}, {0, 1, 0}, DType::Int32), p, true, std::nullopt, 1.0,
                                                    nullptr),
               std::invalid_argument);
}

// ---- names and configs --------------------------------------------------------------------------

TEST(LossFactory, KerasNamesAndAliases) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"sparse_categorical_crossentropy", "sparse_categorical_crossentropy"},
      {"SparseCategoricalCrossentropy", "sparse_categorical_crossentropy"},
      {"categorical_crossentropy", "categorical_crossentropy"},
      {"binary_crossentropy", "binary_crossentropy"},
      {"bce", "binary_crossentropy"},
      {"mse", "mean_squared_error"},
      {"MSE", "mean_squared_error"},
      {"mean_squared_error", "mean_squared_error"},
      {"mae", "mean_absolute_error"},
      {"mean_absolute_error", "mean_absolute_error"},
  };
  for (const auto& [id, name] : cases) EXPECT_EQ(make_loss(id)->name(), name) << id;
  const std::string msg = message_of([] { make_loss("hinge"); });
  EXPECT_NE(msg.find("[loss] unknown loss 'hinge'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'sparse_categorical_crossentropy'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'mse'"), std::string::npos) << msg;
}

TEST(LossFactory, ConfigRoundTrips) {
  std::vector<std::unique_ptr<Loss>> all;
  all.push_back(std::make_unique<SparseCategoricalCrossentropy>(true, 255));
  all.push_back(std::make_unique<SparseCategoricalCrossentropy>());
  all.push_back(std::make_unique<CategoricalCrossentropy>(true, 0.1));
  all.push_back(std::make_unique<BinaryCrossentropy>(false, 0.25));
  all.push_back(std::make_unique<MeanSquaredError>());
  all.push_back(std::make_unique<MeanAbsoluteError>());
  for (const auto& loss : all) {
    const Json cfg = loss->config();
    EXPECT_EQ(cfg.at("name").as_string(), loss->name());
    EXPECT_EQ(cfg.at("reduction").as_string(), "sum_over_batch_size");
    auto back = loss_from_config(Json::parse(cfg.dump()));
    EXPECT_EQ(back->class_name(), loss->class_name());
    EXPECT_EQ(back->config(), cfg) << cfg.dump();
    auto copy = loss->clone();
    EXPECT_EQ(copy->config(), cfg);
  }
  const Json scce = all[0]->config();
  EXPECT_TRUE(scce.at("from_logits").as_bool());
  EXPECT_EQ(scce.at("ignore_class").as_int(), 255);
  EXPECT_TRUE(all[1]->config().at("ignore_class").is_null());
  EXPECT_DOUBLE_EQ(all[2]->config().at("label_smoothing").as_number(), 0.1);

  // Keras's serialised form.
  auto keras = loss_from_config(Json::parse(
      R"({"class_name": "CategoricalCrossentropy", "config": {"name": "categorical_crossentropy",
          "reduction": "sum_over_batch_size", "from_logits": true, "label_smoothing": 0.2, "axis": -1}})"));
  auto* cce = dynamic_cast<CategoricalCrossentropy*>(keras.get());
  ASSERT_NE(cce, nullptr);
  EXPECT_TRUE(cce->from_logits());
  EXPECT_DOUBLE_EQ(cce->label_smoothing(), 0.2);
  EXPECT_THROW(loss_from_config(Json::parse(R"({"name": "mse", "reduction": "sum"})")), std::invalid_argument);
  EXPECT_THROW(loss_from_config(Json::parse(R"({"name": "binary_crossentropy", "axis": 1})")), std::invalid_argument);
}

TEST(SqueezeOrExpand, FollowsKerasRules) {
  EXPECT_EQ(squeeze_or_expand_to_same_rank({4}, {4, 1}), std::make_pair(Shape{4, 1}, Shape{4, 1}));
  EXPECT_EQ(squeeze_or_expand_to_same_rank({4, 1}, {4}), std::make_pair(Shape{4, 1}, Shape{4, 1}));
  EXPECT_EQ(squeeze_or_expand_to_same_rank({4, 3}, {4, 3, 1}), std::make_pair(Shape{4, 3}, Shape{4, 3}));
  EXPECT_EQ(squeeze_or_expand_to_same_rank({4, 3, 1}, {4, 3}), std::make_pair(Shape{4, 3}, Shape{4, 3}));
  EXPECT_EQ(squeeze_or_expand_to_same_rank({4}, {4, 10}), std::make_pair(Shape{4}, Shape{4, 10}));
}

// Keras's sample_weight: each sample's loss and gradient times its weight, for every loss, over
// (batch, classes) rows and over sequence outputs (batch, steps, classes) whose steps share their
// sample's weight; the sum stays a sum (the caller divides by the sample count, as Keras does).
TEST(SampleWeights, ScaleEachSamplesLossAndGradient) {
  std::mt19937_64 rng(17);
  const std::int64_t batch = 3, steps = 2, classes = 4;
  const Tensor weights = make({batch}, {0.5, 0.0, 2.25}, DType::Float32);
  std::vector<std::unique_ptr<Loss>> all;
  all.push_back(std::make_unique<SparseCategoricalCrossentropy>(true));
  all.push_back(std::make_unique<CategoricalCrossentropy>(false, 0.1));
  all.push_back(std::make_unique<BinaryCrossentropy>(true));
  all.push_back(std::make_unique<MeanSquaredError>());
  all.push_back(std::make_unique<MeanAbsoluteError>());
  for (const auto& loss : all) {
    const bool sparse = loss->name() == "sparse_categorical_crossentropy";
    const std::vector<double> p = uniform(rng, batch * steps * classes, 0.05, 0.95);
    const Tensor pred = make({batch, steps, classes}, p);
    std::vector<double> t;
    for (std::int64_t i = 0; i < batch * steps * (sparse ? 1 : classes); ++i)
      t.push_back(sparse ? static_cast<double>(i % classes) : static_cast<double>((i * 7) % 3 == 0));
    const Tensor y = sparse ? make({batch, steps}, t, DType::Int32) : make({batch, steps, classes}, t);
    Tensor g;
    const double sum = loss->forward_backward(y, pred, 0.5, &g, &weights);
    double expected = 0.0;
    const std::int64_t per_sample = steps * classes;
    for (std::int64_t b = 0; b < batch; ++b) {
      // The sample alone, unweighted.
      const Tensor yb = y.rows(b, b + 1), pb = pred.rows(b, b + 1);
      Tensor gb;
      const double w = weights.data<float>()[b];
      expected += w * loss->forward_backward(yb, pb, 0.5, &gb);
      const std::vector<double> got = values(g), alone = values(gb);
      for (std::int64_t k = 0; k < per_sample; ++k)
        EXPECT_NEAR(got[static_cast<std::size_t>(b * per_sample + k)], w * alone[static_cast<std::size_t>(k)], 1e-15)
            << loss->name() << " sample " << b;
    }
    EXPECT_NEAR(sum, expected, 1e-12) << loss->name();
  }
}

TEST(SampleWeights, UnitWeightsAreBitwiseTheUnweightedLoss) {
  std::mt19937_64 rng(18);
  const Tensor pred = make({5, 3}, uniform(rng, 15, -3, 3), DType::Float32);
  const Tensor labels = make({5}, {0, 2, 1, 1, 0}, DType::Int32);
  const Tensor ones = make({5}, {1, 1, 1, 1, 1}, DType::Float32);
  SparseCategoricalCrossentropy loss(true);
  Tensor g1, g2;
  const double plain = loss.forward_backward(labels, pred, 0.2, &g1);
  const double weighted = loss.forward_backward(labels, pred, 0.2, &g2, &ones);
  EXPECT_EQ(plain, weighted);
  EXPECT_EQ(std::memcmp(g1.raw(), g2.raw(), g1.nbytes()), 0);
}

TEST(SampleWeights, WeightsThatDoNotFitTheBatchAreRefused) {
  const Tensor pred = make({4, 2}, {0.1, 0.9, 0.2, 0.8, 0.3, 0.7, 0.4, 0.6});
  const Tensor target = make({4, 2}, {0, 1, 0, 1, 1, 0, 1, 0});
  MeanSquaredError mse;
  const Tensor three = make({3}, {1, 1, 1}, DType::Float32);
  const std::string msg = message_of([&] { mse.forward_backward(target, pred, 1.0, nullptr, &three); });
  EXPECT_EQ(msg.rfind("[loss] mean_squared_error: sample_weight must be float32 with one value per sample (4", 0), 0u)
      << msg;
  const Tensor doubles = make({4}, {1, 1, 1, 1}, DType::Float64);
  EXPECT_THROW(mse.forward_backward(target, pred, 1.0, nullptr, &doubles), std::invalid_argument);
  // The op checks its own contract too: weights covering the rows in equal runs.
  EXPECT_THROW(ops::mean_squared_error(target, pred, 1.0, nullptr, &three), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
