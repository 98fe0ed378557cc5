// Gradient accumulation in backward (Layer::set_accumulate_gradients), which a pipeline stage uses
// to sum its micro-batches' gradients without a separate pass: Dense's accumulated gradients are
// bitwise those of overwriting them per micro-batch and adding each into a running sum with
// ops::add_into (the pass it replaces), for micro-batches whose rows fit one K block of the BLAS;
// the flag off overwrites again; layers that keep the default do not claim support.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/ops/accumulate.h"

namespace mdtrain {
namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

ForwardContext training() {
  ForwardContext ctx;
  ctx.training = true;
  return ctx;
}

Dense::Options dense_options(const char* activation) {
  Dense::Options o;
  o.units = 24;
  o.activation = activation;
  o.bias_initializer = "glorot_uniform";  // nonzero biases: the kernel gradient alone is not enough
  return o;
}

struct MicroBatch {
  Tensor x, dy;
};

// Micro-batches of uneven row counts (up to 64 rows, within the BLAS's K block), float32 as trained.
std::vector<MicroBatch> micro_batches(std::int64_t features, std::int64_t units) {
  std::mt19937_64 rng(5);
  std::vector<MicroBatch> out;
  for (std::int64_t rows : {8, 7, 64, 1, 5})
    out.push_back({testing::random_tensor({rows, features}, rng, -2.0, 2.0, DType::Float32),
                   testing::random_tensor({rows, units}, rng, -1.0, 1.0, DType::Float32)});
  return out;
}

// The gradients of `layer`'s parameters summed over the micro-batches: accumulated in backward, or
// (reference) overwritten by each backward and added into a sum as the pipeline's pass did.
std::vector<Tensor> summed_gradients(Dense& layer, const std::vector<MicroBatch>& batches, bool in_backward,
                                     bool from_logits) {
  std::vector<Tensor> sums;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    if (in_backward) layer.set_accumulate_gradients(b > 0);
    layer.forward(batches[b].x, training());
    if (from_logits) layer.backward_from_logits(batches[b].dy, b % 2 == 0);
    else layer.backward(batches[b].dy, b % 2 == 0);
    if (in_backward) continue;
    const auto params = layer.parameters();
    for (std::size_t k = 0; k < params.size(); ++k) {
      if (b == 0) {
        sums.push_back(Tensor(params[k]->grad.shape(), params[k]->grad.dtype()));
        sums.back().copy_from(params[k]->grad);
      } else {
        ops::add_into(sums[k], params[k]->grad);
      }
    }
  }
  if (in_backward)
    for (Parameter* p : layer.parameters()) sums.push_back(p->grad);
  layer.set_accumulate_gradients(false);
  return sums;
}

TEST(GradientAccumulation, DenseAccumulatedInBackwardEqualsTheAddPassBitwise) {
  for (const char* activation : {"relu", "softmax"}) {
    for (bool from_logits : {false, true}) {
      if (from_logits && std::string(activation) == "relu") continue;  // logits need softmax or sigmoid
      Dense layer("d", dense_options(activation));
      layer.build({40}, 3);
      ASSERT_TRUE(layer.supports_gradient_accumulation());
      const auto batches = micro_batches(40, 24);
      auto reference = layer.clone();
      const auto want = summed_gradients(static_cast<Dense&>(*reference), batches, false, from_logits);
      const auto got = summed_gradients(layer, batches, true, from_logits);
      ASSERT_EQ(got.size(), 2u);  // kernel, bias
      ASSERT_EQ(want.size(), got.size());
      for (std::size_t k = 0; k < got.size(); ++k)
        EXPECT_TRUE(bitwise_equal(got[k], want[k])) << activation << " from_logits " << from_logits << " param " << k;
    }
  }
}

TEST(GradientAccumulation, DenseOverwritesItsGradientsWithTheFlagOff) {
  Dense layer("d", dense_options("tanh"));
  layer.build({40}, 3);
  const auto batches = micro_batches(40, 24);
  auto fresh = layer.clone();
  // Accumulate two micro-batches, then switch the flag off: the next backward overwrites.
  layer.set_accumulate_gradients(true);
  EXPECT_TRUE(layer.accumulate_gradients());
  for (int b = 0; b < 2; ++b) {
    layer.forward(batches[static_cast<std::size_t>(b)].x, training());
    layer.backward(batches[static_cast<std::size_t>(b)].dy, true);
  }
  layer.set_accumulate_gradients(false);
  layer.forward(batches[2].x, training());
  layer.backward(batches[2].dy, true);
  fresh->forward(batches[2].x, training());
  fresh->backward(batches[2].dy, true);
  const auto got = layer.parameters(), want = fresh->parameters();
  for (std::size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(bitwise_equal(got[k]->grad, want[k]->grad)) << k;
  EXPECT_FALSE(fresh->accumulate_gradients());  // a copy starts overwriting
}

TEST(GradientAccumulation, LayersKeepingTheDefaultDoNotSupportIt) {
  BatchNormalization bn("bn", BatchNormalization::Options{});
  EXPECT_FALSE(bn.supports_gradient_accumulation());
}

}  // namespace
}  // namespace mdtrain
