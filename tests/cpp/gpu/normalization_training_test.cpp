// BatchNormalization and LayerNormalization training on GPUs (label "gpu"): a small model with
// both, trained for one epoch on one GPU, against the same model on the CPU (weights, moving
// statistics, loss, evaluation and prediction through the moving statistics); synchronized
// BatchNormalization under MirroredStrategy on two GPUs keeping replicas bitwise identical
// (moving statistics included) and matching one GPU on the whole batch. They skip, printing why,
// without a GPU; MDTRAIN_GPU_TESTS_ON_CPU=1 runs them with CPU devices in place of GPUs (a check of
// the tests, not of CUDA).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "gpu/training_util.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/layer_normalization.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/mirrored_strategy.h"
#include "mdtrain/strategy/one_device_strategy.h"

namespace mdtrain {
namespace {

using gpu_testing::cpu;
using gpu_testing::expect_weights_close;
using gpu_testing::kGpu;
using gpu_testing::log_of;
using gpu_testing::one_gpu;
using gpu_testing::to_host;
using gpu_testing::two_gpus;

constexpr std::int64_t kRows = 256, kPositions = 4, kChannels = 6, kClasses = 4, kBatch = 32;

struct Data {
  Tensor x, labels;
};

// Features around 3 (so the batch statistics are far from the initial moving ones), the class
// showing as +1.5 on some channels.
Data make_data(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 1.0);
  Data d{Tensor({kRows, kPositions, kChannels}, DType::Float32), Tensor({kRows}, DType::Int32)};
  for (std::int64_t i = 0; i < kRows; ++i) {
    const int c = static_cast<int>(i % kClasses);
    d.labels.data<std::int32_t>()[i] = c;
    for (std::int64_t f = 0; f < kPositions * kChannels; ++f)
      d.x.data<float>()[i * kPositions * kChannels + f] =
          static_cast<float>(3.0 + (f % kClasses == c ? 1.5 : 0.0) + noise(rng));
  }
  return d;
}

// BatchNormalization (per position of a (batch, 4, 6) input) -> LayerNormalization -> Flatten ->
// Dense(16, relu) -> BatchNormalization(scale=False) -> Dense(4) -> softmax.
std::unique_ptr<Model> norm_model(std::shared_ptr<Strategy> strategy, const std::string& optimizer, bool synchronized) {
  auto m = std::make_unique<Model>("norm_mlp", 77);
  BatchNormalization::Options bn;
  bn.momentum = 0.9;  // the moving statistics move visibly in 8 steps
  bn.synchronized = synchronized;
  m->add(std::make_shared<BatchNormalization>("batch_normalization", bn));
  m->add(std::make_shared<LayerNormalization>("layer_normalization", LayerNormalization::Options{}));
  m->add(std::make_shared<Flatten>("flatten"));
  Dense::Options hidden;
  hidden.units = 16;
  hidden.activation = "relu";
  m->add(std::make_shared<Dense>("dense", hidden));
  BatchNormalization::Options bn_no_gamma = bn;
  bn_no_gamma.scale = false;
  m->add(std::make_shared<BatchNormalization>("batch_normalization_1", bn_no_gamma));
  Dense::Options out;
  out.units = kClasses;
  m->add(std::make_shared<Dense>("dense_1", out));
  m->add(std::make_shared<ActivationLayer>("activation", "softmax"));
  m->build({kPositions, kChannels});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")),
             std::shared_ptr<Optimizer>(make_optimizer(optimizer)), {"accuracy"}, std::move(strategy));
  return m;
}

Model::EpochResult one_epoch(Model& m, const Data& d, const Model::BatchCallback& cb = nullptr) {
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));
  return m.train_epoch(d.x, d.labels, order.data(), kRows, kBatch, (kRows + kBatch - 1) / kBatch, cb);
}

class NormalizationOnGpu : public ::testing::TestWithParam<const char*> {};

TEST_P(NormalizationOnGpu, OneEpochOnOneGpuMatchesTheCpu) {
  MDTRAIN_REQUIRE_GPU();
  const Data d = make_data(3);
  auto on_cpu = norm_model(cpu(), GetParam(), false);
  auto on_gpu = norm_model(one_gpu(), GetParam(), false);
  const auto want = one_epoch(*on_cpu, d), got = one_epoch(*on_gpu, d);
  EXPECT_NEAR(log_of(got.logs, "loss"), log_of(want.logs, "loss"), 1e-4);
  EXPECT_NEAR(log_of(got.logs, "accuracy"), log_of(want.logs, "accuracy"), 1.0 / kRows + 1e-12);

  // The replica's moving statistics are non-trainable weights on its device.
  TrainEngine& e = on_gpu->engine();
  ASSERT_EQ(e.replica_network(0).non_trainable_parameters().size(), 4u);  // two layers' mean, variance
  for (Parameter* p : e.replica_network(0).non_trainable_parameters()) EXPECT_EQ(p->value.device(), kGpu) << p->name;

  // Every weight, the moving statistics included (get_weights' order: gamma, beta, moving_mean,
  // moving_variance), came back to the host and agrees with the CPU's.
  const auto w_gpu = on_gpu->get_weights(), w_cpu = on_cpu->get_weights();
  expect_weights_close(w_gpu, w_cpu, GetParam());
  // The moving statistics did move (the comparison above is not of untouched initial values).
  ASSERT_EQ(w_cpu.size(), 13u);
  EXPECT_GT(w_cpu[2].data<float>()[0], 0.5f) << "batch_normalization/moving_mean";

  // Inference normalizes with the moving statistics, on the GPU too.
  const Logs e_gpu = on_gpu->evaluate(d.x, d.labels, kBatch, nullptr);
  const Logs e_cpu = on_cpu->evaluate(d.x, d.labels, kBatch, nullptr);
  EXPECT_NEAR(log_of(e_gpu, "loss"), log_of(e_cpu, "loss"), 1e-4);
  EXPECT_NEAR(log_of(e_gpu, "accuracy"), log_of(e_cpu, "accuracy"), 1.0 / kRows + 1e-12);
  const Tensor p_gpu = on_gpu->predict(d.x, kBatch), p_cpu = on_cpu->predict(d.x, kBatch);
  EXPECT_EQ(gpu_testing::compare(p_gpu, p_cpu, gpu_testing::kTrainingRtol, gpu_testing::kTrainingAtol), "")
      << "predict";
}

INSTANTIATE_TEST_SUITE_P(Optimizers, NormalizationOnGpu, ::testing::Values("sgd", "adam"));

TEST(NormalizationGpuTraining, SynchronizedBatchNormOnTwoGpusMatchesOneGpuOnTheWholeBatch) {
  MDTRAIN_REQUIRE_GPU();
  if (!gpu_testing::harness_on_cpu() && cuda::device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, this process sees " << cuda::device_count();
  const Data d = make_data(9);
  auto single = norm_model(one_gpu(), "adam", true);
  auto mirrored = norm_model(two_gpus(), "adam", true);
  std::atomic<int> checked{0};
  Model& m = *mirrored;
  one_epoch(m, d, [&m, &checked](std::int64_t step, const Logs&) {
    TrainEngine& e = m.engine();
    const Tensor r0 = to_host(e.replica_network(0).packed_values());
    const Tensor s0 = to_host(e.replica_network(0).non_trainable_values());
    for (int r = 1; r < e.num_replicas(); ++r) {
      EXPECT_TRUE(gpu_testing::same_bytes(e.replica_network(r).packed_values(), r0))
          << "replica " << r << "'s weights differ from replica 0's after step " << step;
      EXPECT_TRUE(gpu_testing::same_bytes(e.replica_network(r).non_trainable_values(), s0))
          << "replica " << r << "'s moving statistics differ from replica 0's after step " << step;
    }
    ++checked;
    return false;
  });
  EXPECT_EQ(checked.load(), (kRows + kBatch - 1) / kBatch);
  one_epoch(*single, d);
  // Synchronized statistics are the global batch's: two replicas train as one does on the batch.
  expect_weights_close(mirrored->get_weights(), single->get_weights(), "2 GPUs vs 1");
}

}  // namespace
}  // namespace mdtrain
