// What a strategy needs to run micro-batches on copies of a layer (a pipeline stage keeping each
// in-flight micro-batch's activations): BatchNormalization's deferred statistics recorded on copies
// and moved to the layer give the moving statistics of recording them on the layer itself, in the
// order they were moved; and held_activation_bytes reports a layer's per-call state, per copy.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/dense.h"

namespace mdtrain {
namespace {

Tensor rows_of(std::int64_t rows, std::int64_t features, std::uint64_t seed) {
  Tensor t({rows, features}, DType::Float32);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(1.0f, 2.0f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = noise(rng);
  return t;
}

ForwardContext deferred() {
  ForwardContext ctx;
  ctx.training = true;
  ctx.defer_statistics = true;
  return ctx;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(LayerStateCopies, BatchNormStatisticsMovedFromCopiesEqualThoseRecordedOnTheLayer) {
  BatchNormalization::Options o;
  o.momentum = 0.5;
  BatchNormalization layer("bn", o), reference("bn", o);
  layer.build({3}, 1);
  reference.build({3}, 1);
  const Tensor a = rows_of(5, 3, 1), b = rows_of(4, 3, 2), c = rows_of(3, 3, 3);
  // Three micro-batches on two copies (the first copy runs two of them), moved after each forward.
  auto first = layer.clone(), second = layer.clone();
  first->forward(a, deferred());
  first->move_deferred_statistics_to(layer);
  second->forward(b, deferred());
  second->move_deferred_statistics_to(layer);
  first->forward(c, deferred());
  first->move_deferred_statistics_to(layer);
  first->move_deferred_statistics_to(layer);  // nothing left to move: changes nothing
  for (const Tensor* x : {&a, &b, &c}) reference.forward(*x, deferred());
  layer.apply_deferred_statistics(nullptr);
  reference.apply_deferred_statistics(nullptr);
  const auto got = layer.parameters(), want = reference.parameters();
  ASSERT_EQ(got.size(), 4u);  // gamma, beta, moving mean, moving variance
  BatchNormalization fresh("bn", o);
  fresh.build({3}, 1);
  for (std::size_t i = 2; i < 4; ++i) {
    EXPECT_FALSE(bitwise_equal(got[i]->value, fresh.parameters()[i]->value)) << "did not move";
    EXPECT_TRUE(bitwise_equal(got[i]->value, want[i]->value)) << got[i]->name;
  }
  // The copies' records were moved, not copied: applying on a copy moves nothing.
  const Tensor before = first->parameters()[2]->value.clone();
  first->apply_deferred_statistics(nullptr);
  EXPECT_TRUE(bitwise_equal(first->parameters()[2]->value, before));
}

TEST(LayerStateCopies, BatchNormMovesItsStatisticsOnlyToACopyOfItself) {
  BatchNormalization bn("bn", {}), wider("wider", {});
  bn.build({3}, 1);
  wider.build({4}, 1);
  Dense::Options d;
  d.units = 3;
  Dense dense("dense", d);
  dense.build({3}, 1);
  EXPECT_THROW(bn.move_deferred_statistics_to(dense), std::invalid_argument);
  EXPECT_THROW(bn.move_deferred_statistics_to(wider), std::invalid_argument);
}

TEST(LayerStateCopies, HeldActivationBytesFollowTheLastForwardPerCopy) {
  Dense::Options d;
  d.units = 6;
  d.activation = "relu";
  Dense dense("dense", d);
  dense.build({4}, 1);
  EXPECT_EQ(dense.held_activation_bytes(), 0);  // no forward yet
  ForwardContext ctx;
  ctx.training = true;
  dense.forward(rows_of(8, 4, 1), ctx);
  const std::int64_t eight = dense.held_activation_bytes();
  EXPECT_GE(eight, 8 * 6 * 4);  // at least the output: 8 rows x 6 units of float32
  dense.backward(rows_of(8, 6, 2), true);
  const std::int64_t with_backward = dense.held_activation_bytes();
  EXPECT_GE(with_backward, eight + 8 * 4 * 4);  // and dL/dx after a backward
  // A copy has its own buffers: nothing until its own forward, and the layer's do not change.
  auto copy = dense.clone();
  EXPECT_EQ(copy->held_activation_bytes(), 0);
  copy->forward(rows_of(2, 4, 3), ctx);
  EXPECT_GT(copy->held_activation_bytes(), 0);
  EXPECT_LT(copy->held_activation_bytes(), eight);
  EXPECT_EQ(dense.held_activation_bytes(), with_backward);
  // BatchNormalization: its statistics buffers (made at build), then its output on top.
  BatchNormalization bn("bn", {});
  bn.build({4}, 1);
  const std::int64_t built = bn.held_activation_bytes();
  bn.forward(rows_of(8, 4, 4), ctx);
  EXPECT_GE(bn.held_activation_bytes(), built + 8 * 4 * 4);
}

}  // namespace
}  // namespace mdtrain
