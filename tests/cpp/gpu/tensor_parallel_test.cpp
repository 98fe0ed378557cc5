// ModelParallelStrategy on GPUs (label "gpu"): a column-parallel Dense feeding a row-parallel one
// (Megatron's pair, with a Dropout between them) split over 2 GPUs with NCCL trains like the same
// model on one GPU, and each GPU holds half of the sharded weights, measured by its allocations.
// Skips, printing why, without 2 GPUs; MDTRAIN_GPU_TESTS_ON_CPU=1 runs it with CPU devices in
// place of them (a check of the test, not of CUDA).
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "gpu/training_util.h"
#include "mdtrain/core/memory_stats.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/model_parallel_strategy.h"

namespace mdtrain {
namespace {

using gpu_testing::expect_weights_close;
using gpu_testing::harness_on_cpu;
using gpu_testing::one_gpu;

constexpr std::int64_t kRows = 96, kFeatures = 24, kHidden = 64, kClasses = 10, kBatch = 32;

std::unique_ptr<Model> mlp(std::shared_ptr<Strategy> strategy) {
  auto m = std::make_unique<Model>("tp_mlp", 99);
  Dense::Options hidden;
  hidden.units = kHidden;
  hidden.activation = "relu";
  m->add(std::make_shared<Dense>("hidden0", hidden));
  m->add(std::make_shared<Dropout>("dropout", 0.1, 5));
  m->add(std::make_shared<Dense>("hidden1", hidden));
  Dense::Options out;
  out.units = kClasses;
  m->add(std::make_shared<Dense>("out", out));
  m->build({kFeatures});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")),
             std::shared_ptr<Optimizer>(make_optimizer("adam")), {}, std::move(strategy));
  return m;
}

TEST(GpuTensorParallel, MegatronPairOnTwoGpusTrainsLikeOneGpu) {
  MDTRAIN_REQUIRE_GPU();
  if (!harness_on_cpu() && cuda::device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, this process sees " << cuda::device_count();
  const DeviceKind kind = harness_on_cpu() ? DeviceKind::CPU : DeviceKind::CUDA;
  const DeviceMesh mesh({2}, {"model"}, {Device{kind, 0}, Device{kind, 1}});
  WeightLayouts layouts;
  layouts["hidden0/kernel"] = {std::nullopt, std::string("model")};
  layouts["hidden0/bias"] = {std::string("model")};
  layouts["hidden1/kernel"] = {std::string("model"), std::nullopt};
  auto split = mlp(std::make_shared<ModelParallelStrategy>(mesh, layouts, std::nullopt));
  auto single = mlp(one_gpu());

  std::mt19937_64 rng(3);
  std::normal_distribution<float> noise;
  Tensor x({kRows, kFeatures}, DType::Float32), y({kRows}, DType::Int32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = noise(rng);
  for (std::int64_t i = 0; i < kRows; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % kClasses);
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  const Device second{kind, 1};
  const std::int64_t before = memory_info(second).current;
  for (auto* m : {split.get(), single.get()})
    for (int epoch = 0; epoch < 2; ++epoch) m->train_epoch(x, y, order.data(), kRows, kBatch, kRows / kBatch, nullptr);
  expect_weights_close(split->get_weights(), single->get_weights(), "2 GPUs vs 1");
  // GPU 1 holds half of hidden0 and hidden1's kernels (and hidden0's bias), and whole copies of
  // the rest: weights, gradients and Adam's two slots, plus activations.
  const std::int64_t half = (kFeatures * kHidden + kHidden + kHidden * kHidden) / 2,
                     whole = kHidden + kHidden * kClasses + kClasses;
  EXPECT_GE(memory_info(second).current - before, (half + whole) * 4 * 4);
}

}  // namespace
}  // namespace mdtrain
