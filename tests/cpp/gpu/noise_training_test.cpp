// Training with the noise and regularization layers on a GPU (label "gpu"): an MLP with
// SpatialDropout1D, GaussianNoise, GaussianDropout and ActivityRegularization trained for one
// epoch on one GPU against the same model on the CPU (the noise is keyed on positions, so both
// draw the same noise up to the last bit of log/cos), and on two GPUs against one. Skips without a
// GPU; MDTRAIN_GPU_TESTS_ON_CPU=1 runs it with CPU devices in place of GPUs.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "gpu/training_util.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/activity_regularization.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/gaussian_dropout.h"
#include "mdtrain/nn/gaussian_noise.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/spatial_dropout.h"
#include "mdtrain/optim/registry.h"

namespace mdtrain {
namespace {

using gpu_testing::cpu;
using gpu_testing::expect_weights_close;
using gpu_testing::log_of;
using gpu_testing::one_gpu;
using gpu_testing::two_gpus;

constexpr std::int64_t kRows = 128, kSteps = 4, kChannels = 5, kClasses = 4, kBatch = 32;

std::unique_ptr<Model> noisy_model(std::shared_ptr<Strategy> strategy) {
  auto m = std::make_unique<Model>("noisy_mlp", 99);
  m->add(std::make_shared<SpatialDropout>("spatial", 1, 0.2, 3));
  m->add(std::make_shared<Flatten>("flatten"));
  Dense::Options hidden;
  hidden.units = 32;
  hidden.activation = "relu";
  m->add(std::make_shared<Dense>("dense", hidden));
  m->add(std::make_shared<GaussianNoise>("noise", 0.1, 4));
  m->add(std::make_shared<GaussianDropout>("gdrop", 0.2, 5));
  m->add(std::make_shared<ActivityRegularization>("activity", 0.01, 0.01));
  Dense::Options out;
  out.units = kClasses;
  m->add(std::make_shared<Dense>("dense_1", out));
  m->add(std::make_shared<ActivationLayer>("activation", "softmax"));
  m->build({kSteps, kChannels});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")),
             std::shared_ptr<Optimizer>(make_optimizer("sgd")), {"accuracy"}, std::move(strategy));
  return m;
}

Model::EpochResult one_epoch(Model& m) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> noise(0.0, 1.0);
  Tensor x({kRows, kSteps, kChannels}, DType::Float32), y({kRows}, DType::Int32);
  for (std::int64_t i = 0; i < kRows; ++i) {
    y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % kClasses);
    for (std::int64_t f = 0; f < kSteps * kChannels; ++f)
      x.data<float>()[i * kSteps * kChannels + f] = static_cast<float>((f % kClasses == i % kClasses) + noise(rng));
  }
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  return m.train_epoch(x, y, order.data(), kRows, kBatch, kRows / kBatch, nullptr);
}

TEST(GpuNoiseTraining, OneEpochOnOneGpuMatchesTheCpu) {
  MDTRAIN_REQUIRE_GPU();
  auto on_cpu = noisy_model(cpu()), on_gpu = noisy_model(one_gpu());
  const auto want = one_epoch(*on_cpu), got = one_epoch(*on_gpu);
  EXPECT_NEAR(log_of(got.logs, "loss"), log_of(want.logs, "loss"), 1e-4);
  expect_weights_close(on_gpu->get_weights(), on_cpu->get_weights(), "sgd");
}

TEST(GpuNoiseTraining, TwoGpusTrainAsOne) {
  MDTRAIN_REQUIRE_GPU();
  if (!gpu_testing::harness_on_cpu() && cuda::device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, this process sees " << cuda::device_count();
  auto one = noisy_model(one_gpu()), two = noisy_model(two_gpus());
  const auto want = one_epoch(*one), got = one_epoch(*two);
  EXPECT_NEAR(log_of(got.logs, "loss"), log_of(want.logs, "loss"), 1e-4);
  expect_weights_close(two->get_weights(), one->get_weights(), "sgd");
}

}  // namespace
}  // namespace mdtrain
