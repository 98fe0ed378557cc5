// Losses of a masked output (nn/masked_steps.h) against the unmasked loss on the kept steps
// written out here, and masks through a LayerGraph's edges and merges (nn/layer_graph.h).
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "mdtrain/nn/concatenate.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/elementwise_merge.h"
#include "mdtrain/nn/layer_graph.h"
#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/masked_steps.h"
#include "mdtrain/nn/masking.h"

namespace mdtrain {
namespace {

Tensor filled(const Shape& shape, const std::vector<double>& values, DType dtype = DType::Float64) {
  Tensor t(shape, dtype);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::Float64) t.data<double>()[i] = values[i];
    else t.data<float>()[i] = static_cast<float>(values[i]);
  }
  return t;
}

TEST(MaskedSteps, LossIsTheSumOverKeptStepsAndTheGradientIsZeroAtMaskedOnes) {
  // (batch 2, timesteps 3, classes 2); steps (0, 1) and (1, 0), (1, 2) are masked.
  const Tensor pred = filled({2, 3, 2}, {0.2, 0.8, 0.6, 0.4, 0.3, 0.7, 0.9, 0.1, 0.5, 0.5, 0.25, 0.75});
  const Tensor labels = filled({2, 3}, {1, 0, 1, 0, 1, 1});
  const Tensor mask = filled({2, 3}, {1, 0, 1, 0, 1, 0});
  losses::SparseCategoricalCrossentropy loss;
  MaskedSteps steps;
  steps.select(loss, labels, pred, mask);
  ASSERT_EQ(steps.kept(), 3);
  EXPECT_EQ(steps.count(loss), 3);
  // The kept steps' losses, alone: the rows (0, 0), (0, 2), (1, 1).
  const Tensor kept_pred = filled({3, 2}, {0.2, 0.8, 0.3, 0.7, 0.5, 0.5});
  const Tensor kept_labels = filled({3}, {1, 1, 1});
  Tensor kept_grad;
  const double want = loss.forward_backward(kept_labels, kept_pred, 1.0 / 3, &kept_grad);
  Tensor dpred;
  EXPECT_EQ(steps.forward_backward(loss, 1.0 / 3, &dpred), want);
  ASSERT_EQ(dpred.shape(), pred.shape());
  const std::vector<int> kept_row = {0, -1, 1, -1, 2, -1};  // step b * 3 + t -> kept row
  for (int s = 0; s < 6; ++s)
    for (int c = 0; c < 2; ++c) {
      const double got = dpred.data<double>()[s * 2 + c];
      if (kept_row[s] < 0) EXPECT_EQ(got, 0.0) << s;
      else EXPECT_EQ(got, kept_grad.data<double>()[kept_row[s] * 2 + c]) << s;
    }
}

TEST(MaskedSteps, IgnoredLabelsCountOnlyWhereKeptAndEverythingMaskedGivesZero) {
  const Tensor pred = filled({1, 4, 2}, {0.2, 0.8, 0.6, 0.4, 0.3, 0.7, 0.9, 0.1});
  const Tensor labels = filled({1, 4}, {2, 2, 1, 0});
  losses::SparseCategoricalCrossentropy loss(false, 2);
  MaskedSteps steps;
  steps.select(loss, labels, pred, filled({1, 4}, {1, 0, 1, 0}));
  EXPECT_EQ(steps.count(loss), 1);  // step 0 is ignored, steps 1 and 3 masked
  steps.select(loss, labels, pred, filled({1, 4}, {0, 0, 0, 0}));
  EXPECT_EQ(steps.count(loss), 0);
  Tensor dpred;
  EXPECT_EQ(steps.forward_backward(loss, 0.0, &dpred), 0.0);
  for (std::int64_t i = 0; i < dpred.numel(); ++i) EXPECT_EQ(dpred.data<double>()[i], 0.0);
}

TEST(MaskedSteps, RefusesOutputsThatAreNotSequencesAndMasksOfTheWrongShape) {
  losses::MeanSquaredError loss;
  MaskedSteps steps;
  EXPECT_THROW(steps.select(loss, filled({2, 3}, std::vector<double>(6)), filled({2, 3}, std::vector<double>(6)),
                            filled({2, 3}, std::vector<double>(6, 1))),
               std::invalid_argument);
  EXPECT_THROW(steps.select(loss, filled({2, 3, 1}, std::vector<double>(6)), filled({2, 3, 1}, std::vector<double>(6)),
                            filled({2, 2}, std::vector<double>(4, 1))),
               std::invalid_argument);
}

std::shared_ptr<Dense> dense(const std::string& name, std::int64_t units) {
  Dense::Options o;
  o.units = units;
  return std::make_shared<Dense>(name, o);
}

// Two (batch 1, timesteps 3, features 1) inputs masked where they are 0, merged.
Tensor merged_mask(std::shared_ptr<Layer> merge, bool mask_b, bool* masked_statically) {
  LayerGraph graph({{3, 1}, {3, 1}});
  const int a = graph.add_node(std::make_shared<Masking>("mask_a", 0.0), {0});
  const int b = mask_b ? graph.add_node(std::make_shared<Masking>("mask_b", 0.0), {1}) : 1;
  const int m = graph.add_node(merge, {a, b});
  graph.set_outputs({graph.add_node(dense("out", 2), {m})});
  graph.build(0, DType::Float64);
  *masked_statically = graph.output_masked();
  graph.forward(filled({1, 6}, {1, 0, 2, 0, 0, 3}), ForwardContext{});
  return graph.output_mask();
}

std::vector<double> values_of(const Tensor& t) {
  return t.defined() ? std::vector<double>(t.data<double>(), t.data<double>() + t.numel()) : std::vector<double>{};
}

TEST(LayerGraphMasks, MergesComputeKerasMasksAndTheOutputCarriesThem) {
  bool masked = false;
  // Add: the OR of its inputs' masks when every input has one, none otherwise.
  EXPECT_EQ(values_of(merged_mask(std::make_shared<Add>("add"), true, &masked)), (std::vector<double>{1, 0, 1}));
  EXPECT_TRUE(masked);
  EXPECT_FALSE(merged_mask(std::make_shared<Add>("add"), false, &masked).defined());
  EXPECT_FALSE(masked);
  // Concatenate on the last axis: an unmasked input counts as all ones.
  EXPECT_EQ(values_of(merged_mask(std::make_shared<Concatenate>("cat", -1), false, &masked)),
            (std::vector<double>{1, 1, 1}));
  EXPECT_TRUE(masked);
  // On the time axis: the masks joined in time.
  EXPECT_EQ(values_of(merged_mask(std::make_shared<Concatenate>("cat", 1), true, &masked)),
            (std::vector<double>{1, 0, 1, 0, 0, 1}));
  EXPECT_TRUE(masked);
  // Keras's Multiply reads masks (masked steps multiply as 1): refused.
  EXPECT_THROW(merged_mask(std::make_shared<Multiply>("times"), true, &masked), std::invalid_argument);
}

TEST(LayerStackMasks, OutputMaskedIsKnownBeforeAnyForward) {
  LayerStack stack;
  stack.add(std::make_shared<Masking>("mask", 0.0));
  stack.add(dense("out", 2));
  stack.build({3, 1}, 0, DType::Float64);
  EXPECT_TRUE(stack.output_masked());
  EXPECT_FALSE(stack.output_mask().defined());
  stack.forward(filled({1, 3, 1}, {0, 1, 0}), ForwardContext{});
  EXPECT_EQ(values_of(stack.output_mask()), (std::vector<double>{0, 1, 0}));
}

}  // namespace
}  // namespace mdtrain
