// MultiOutputLoss: the weighted sum of each output's own mean (a sequence output divides by batch x
// time), its gradient per column block, the same total however the rows are split into slices,
// the packed shapes it checks, ignore_class refused, and its config round trip.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/multi_output_loss.h"

namespace mdtrain {
namespace {

constexpr std::int64_t kRows = 5, kTime = 3, kClasses = 4;

// Output "seq": (batch, 3, 4) softmax-like probabilities with one class id per time step;
// output "reg": (batch, 2) with mean squared error.
MultiOutputLoss two_outputs(double w_seq, double w_reg) {
  std::vector<MultiOutputLoss::Output> outs(2);
  outs[0] = {"seq", std::make_shared<losses::SparseCategoricalCrossentropy>(), w_seq, Shape{kTime, kClasses}};
  outs[1] = {"reg", std::make_shared<losses::MeanSquaredError>(), w_reg, Shape{2}};
  return MultiOutputLoss(std::move(outs));
}

struct Batch {
  Tensor seq_true{Shape{kRows, kTime}, DType::Float32}, seq_pred{Shape{kRows, kTime, kClasses}, DType::Float32};
  Tensor reg_true{Shape{kRows, 2}, DType::Float32}, reg_pred{Shape{kRows, 2}, DType::Float32};
  Tensor y_true{Shape{kRows, kTime + 2}, DType::Float32}, y_pred{Shape{kRows, kTime*kClasses + 2}, DType::Float32};
};

Batch make_batch() {
  Batch b;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t t = 0; t < kTime; ++t) {
      const float label = static_cast<float>((r + t) % kClasses);
      b.seq_true.data<float>()[r * kTime + t] = label;
      b.y_true.data<float>()[r * (kTime + 2) + t] = label;
      for (std::int64_t c = 0; c < kClasses; ++c) {
        const float p = u(rng);
        b.seq_pred.data<float>()[(r * kTime + t) * kClasses + c] = p;
        b.y_pred.data<float>()[r * (kTime * kClasses + 2) + t * kClasses + c] = p;
      }
    }
    for (std::int64_t j = 0; j < 2; ++j) {
      const float t = u(rng) - 0.5f, p = u(rng);
      b.reg_true.data<float>()[r * 2 + j] = t;
      b.reg_pred.data<float>()[r * 2 + j] = p;
      b.y_true.data<float>()[r * (kTime + 2) + kTime + j] = t;
      b.y_pred.data<float>()[r * (kTime * kClasses + 2) + kTime * kClasses + j] = p;
    }
  }
  return b;
}

TEST(MultiOutputLoss, IsTheWeightedSumOfEachOutputsMeanWithItsGradientPerBlock) {
  const Batch b = make_batch();
  const MultiOutputLoss loss = two_outputs(0.7, 2.0);
  EXPECT_EQ(loss.pred_width(), kTime * kClasses + 2);
  EXPECT_EQ(loss.label_width(), kTime + 2);
  Tensor g_seq, g_reg, g;
  const double seq = losses::SparseCategoricalCrossentropy().mean(b.seq_true, b.seq_pred, &g_seq);
  const double reg = losses::MeanSquaredError().mean(b.reg_true, b.reg_pred, &g_reg);
  EXPECT_NEAR(loss.mean(b.y_true, b.y_pred, &g), 0.7 * seq + 2.0 * reg, 1e-12);
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t i = 0; i < kTime * kClasses; ++i)
      EXPECT_NEAR(g.data<float>()[r * loss.pred_width() + i], 0.7 * g_seq.data<float>()[r * kTime * kClasses + i],
                  1e-7);
    for (std::int64_t j = 0; j < 2; ++j)
      EXPECT_NEAR(g.data<float>()[r * loss.pred_width() + kTime * kClasses + j], 2.0 * g_reg.data<float>()[r * 2 + j],
                  1e-7);
  }
  // The per-output sums the logs show: row-normalised, so / rows is each output's mean.
  Tensor t, p;
  loss.output_slice(0, b.y_true, b.y_pred, &t, &p);
  EXPECT_EQ(p.shape(), (Shape{kRows, kTime, kClasses}));
  EXPECT_NEAR(loss.output_row_sum(0, t, p) / kRows, seq, 1e-12);
}

TEST(MultiOutputLoss, SlicesOfABatchAddUpToTheWholeBatch) {
  const Batch b = make_batch();
  const MultiOutputLoss loss = two_outputs(1.0, 0.5);
  Tensor whole_grad;
  const double whole = loss.forward_backward(b.y_true, b.y_pred, 1.0 / kRows, &whole_grad);
  // Replicas with 2 and 3 rows, as a strategy's batch_loss_scale drives them (sample_count = rows).
  double sum = 0;
  for (auto [begin, end] : {std::pair<std::int64_t, std::int64_t>{0, 2}, {2, kRows}}) {
    const Tensor t = b.y_true.rows(begin, end), p = b.y_pred.rows(begin, end);
    EXPECT_EQ(loss.sample_count(t, p), end - begin);
    Tensor g;
    sum += loss.forward_backward(t, p, 1.0 / kRows, &g);
    for (std::int64_t i = 0; i < g.numel(); ++i)
      EXPECT_FLOAT_EQ(g.data<float>()[i], whole_grad.data<float>()[begin * loss.pred_width() + i]);
  }
  EXPECT_NEAR(sum, whole, 1e-12);
  Tensor empty_grad;
  EXPECT_EQ(loss.forward_backward(b.y_true.rows(0, 0), b.y_pred.rows(0, 0), 1.0, &empty_grad), 0.0);
}

TEST(MultiOutputLoss, ChecksPackedShapesAndRefusesIgnoreClass) {
  const Batch b = make_batch();
  const MultiOutputLoss loss = two_outputs(1.0, 1.0);
  EXPECT_THROW(loss.mean(b.y_true, b.seq_pred), std::invalid_argument);
  EXPECT_THROW(loss.mean(b.reg_true, b.y_pred), std::invalid_argument);
  Tensor bad_labels = b.y_true.clone();
  bad_labels.data<float>()[1] = 7.0f;  // a class id of output "seq" out of range
  try {
    loss.mean(bad_labels, b.y_pred);
    FAIL() << "an out-of-range label was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("output 'seq': [loss] sparse_categorical_crossentropy: label 7"),
              std::string::npos)
        << e.what();
  }
  std::vector<MultiOutputLoss::Output> outs(2);
  outs[0] = {"cls", std::make_shared<losses::SparseCategoricalCrossentropy>(false, 0), 1.0, Shape{3}};
  outs[1] = {"reg", std::make_shared<losses::MeanSquaredError>(), 1.0, Shape{2}};
  try {
    MultiOutputLoss bad(std::move(outs));
    FAIL() << "ignore_class was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("output 'cls'"), std::string::npos) << e.what();
  }
}

TEST(MultiOutputLoss, ConfigRoundTrips) {
  const Batch b = make_batch();
  const MultiOutputLoss loss = two_outputs(0.25, 3.0);
  const auto back = loss_from_config(loss.config());
  EXPECT_EQ(back->class_name(), "MultiOutputLoss");
  EXPECT_EQ(back->config().dump(), loss.config().dump());
  EXPECT_DOUBLE_EQ(back->mean(b.y_true, b.y_pred), loss.mean(b.y_true, b.y_pred));
}

}  // namespace
}  // namespace mdtrain
