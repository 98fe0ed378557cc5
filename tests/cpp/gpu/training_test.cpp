// Training end to end on GPUs (label "gpu"): the seed MLP trained for one epoch on one GPU against
// the same model on the CPU, for every optimizer and the losses / metrics; MirroredStrategy on two
// GPUs (NCCL) keeping replicas bitwise identical and matching one GPU; weights and optimizer state
// through save/load. They skip, printing why, without a GPU; MDTRAIN_GPU_TESTS_ON_CPU=1 runs them
// with CPU devices in place of GPUs (a check of the tests, not of CUDA).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "gpu/gpu_test_util.h"
#include "gpu/training_util.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/flatten.h"
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

constexpr std::int64_t kRows = 256, kFeatures = 20, kClasses = 10, kBatch = 32;

struct Data {
  Tensor x, labels, one_hot;
};

Data make_data(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 1.0);
  Data d{Tensor({kRows, 2, kFeatures / 2}, DType::Float32), Tensor({kRows}, DType::Int32),
         Tensor::zeros({kRows, kClasses}, DType::Float32)};
  for (std::int64_t i = 0; i < kRows; ++i) {
    const int c = static_cast<int>(i % kClasses);
    d.labels.data<std::int32_t>()[i] = c;
    d.one_hot.data<float>()[i * kClasses + c] = 1.0f;
    for (std::int64_t f = 0; f < kFeatures; ++f)
      d.x.data<float>()[i * kFeatures + f] = static_cast<float>((f % kClasses == c ? 2.0 : 0.0) + noise(rng));
  }
  return d;
}

// The seed model: Flatten -> Dense(128, relu) -> Dropout(0.1) -> Dense(10) -> Activation(output).
std::unique_ptr<Model> seed_model(std::shared_ptr<Strategy> strategy, const std::string& optimizer,
                                  const std::string& loss, const std::string& output_activation,
                                  const std::vector<std::string>& metrics) {
  auto m = std::make_unique<Model>("seed_mlp", 1234);
  m->add(std::make_shared<Flatten>("flatten"));
  Dense::Options hidden;
  hidden.units = 128;
  hidden.activation = "relu";
  m->add(std::make_shared<Dense>("dense", hidden));
  m->add(std::make_shared<Dropout>("dropout", 0.1, 7));
  Dense::Options out;
  out.units = kClasses;
  m->add(std::make_shared<Dense>("dense_1", out));
  m->add(std::make_shared<ActivationLayer>("activation", output_activation));
  m->build({2, kFeatures / 2});
  m->compile(std::shared_ptr<Loss>(make_loss(loss)), std::shared_ptr<Optimizer>(make_optimizer(optimizer)), metrics,
             std::move(strategy));
  return m;
}

std::vector<std::int64_t> order_of(std::uint64_t seed) {
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  return order;
}

Model::EpochResult one_epoch(Model& m, const Tensor& x, const Tensor& y, const Model::BatchCallback& cb = nullptr) {
  const auto order = order_of(42);
  return m.train_epoch(x, y, order.data(), kRows, kBatch, (kRows + kBatch - 1) / kBatch, cb);
}

class SeedMlpOnGpu : public ::testing::TestWithParam<const char*> {};

TEST_P(SeedMlpOnGpu, OneEpochOnOneGpuMatchesTheCpu) {
  MDTRAIN_REQUIRE_GPU();
  const Data d = make_data(3);
  auto on_cpu = seed_model(cpu(), GetParam(), "sparse_categorical_crossentropy", "softmax", {"accuracy"});
  auto on_gpu = seed_model(one_gpu(), GetParam(), "sparse_categorical_crossentropy", "softmax", {"accuracy"});
  const auto want = one_epoch(*on_cpu, d.x, d.labels), got = one_epoch(*on_gpu, d.x, d.labels);
  EXPECT_NEAR(log_of(got.logs, "loss"), log_of(want.logs, "loss"), 1e-4);
  EXPECT_NEAR(log_of(got.logs, "accuracy"), log_of(want.logs, "accuracy"), 1.0 / kRows + 1e-12);
  expect_weights_close(on_gpu->get_weights(), on_cpu->get_weights(), GetParam());
  // The optimizer slots come back to the host and agree too.
  const auto s_gpu = on_gpu->optimizer_state(), s_cpu = on_cpu->optimizer_state();
  ASSERT_EQ(s_gpu.size(), s_cpu.size());
  for (std::size_t i = 1; i < s_cpu.size(); ++i) {
    EXPECT_TRUE(s_gpu[i].second.device().is_cpu()) << s_gpu[i].first;
    EXPECT_TRUE(
        gpu_testing::compare(s_gpu[i].second, s_cpu[i].second, gpu_testing::kTrainingRtol, gpu_testing::kTrainingAtol)
            .empty())
        << s_gpu[i].first;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOptimizer, SeedMlpOnGpu, ::testing::Values("sgd", "adam", "adamw", "rmsprop", "adagrad"));

TEST(GpuTraining, EveryLossAndMetricMatchesTheCpu) {
  MDTRAIN_REQUIRE_GPU();
  const Data d = make_data(5);
  struct Case {
    const char* loss;
    const char* activation;
    bool sparse;
    std::vector<std::string> metrics;
  };
  const std::vector<Case> cases = {
      {"sparse_categorical_crossentropy", "softmax", true, {"accuracy", "sparse_top_k_categorical_accuracy"}},
      {"categorical_crossentropy", "softmax", false, {"accuracy", "categorical_accuracy"}},
      {"binary_crossentropy", "sigmoid", false, {"binary_accuracy"}},
      {"mean_squared_error", "linear", false, {"mse", "mae"}},
      {"mean_absolute_error", "linear", false, {"mae"}},
  };
  for (const auto& c : cases) {
    const Tensor& y = c.sparse ? d.labels : d.one_hot;
    auto on_cpu = seed_model(cpu(), "adam", c.loss, c.activation, c.metrics);
    auto on_gpu = seed_model(one_gpu(), "adam", c.loss, c.activation, c.metrics);
    const auto want = one_epoch(*on_cpu, d.x, y), got = one_epoch(*on_gpu, d.x, y);
    ASSERT_EQ(got.logs.size(), want.logs.size()) << c.loss;
    for (std::size_t i = 0; i < want.logs.size(); ++i)
      EXPECT_NEAR(got.logs[i].second, want.logs[i].second, 1e-4 + 1.0 / kRows) << c.loss << " " << want.logs[i].first;
    expect_weights_close(on_gpu->get_weights(), on_cpu->get_weights(), c.loss);
    // Evaluation and prediction run on the GPU replica too.
    const Logs e_gpu = on_gpu->evaluate(d.x, y, kBatch, nullptr), e_cpu = on_cpu->evaluate(d.x, y, kBatch, nullptr);
    for (std::size_t i = 0; i < e_cpu.size(); ++i)
      EXPECT_NEAR(e_gpu[i].second, e_cpu[i].second, 1e-4 + 1.0 / kRows) << c.loss << " evaluate " << e_cpu[i].first;
  }
}

TEST(GpuTraining, MirroredOnTwoGpusKeepsReplicasIdenticalAndMatchesOneGpu) {
  MDTRAIN_REQUIRE_GPU();
  if (!gpu_testing::harness_on_cpu() && cuda::device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, this process sees " << cuda::device_count();
  const Data d = make_data(9);
  for (const char* opt : {"sgd", "adam"}) {
    auto single = seed_model(one_gpu(), opt, "sparse_categorical_crossentropy", "softmax", {"accuracy"});
    auto mirrored = seed_model(two_gpus(), opt, "sparse_categorical_crossentropy", "softmax", {"accuracy"});
    std::atomic<int> checked{0};
    Model& m = *mirrored;
    one_epoch(m, d.x, d.labels, [&m, &checked](std::int64_t step, const Logs&) {
      TrainEngine& e = m.engine();
      const Tensor r0 = to_host(e.replica_network(0).packed_values());
      for (int r = 1; r < e.num_replicas(); ++r)
        EXPECT_TRUE(gpu_testing::same_bytes(e.replica_network(r).packed_values(), r0))
            << "replica " << r << " differs from replica 0 after step " << step;
      // The model's host weights are replica 0's.
      EXPECT_TRUE(gpu_testing::same_bytes(m.stack().packed_values(), r0)) << "primary after step " << step;
      ++checked;
      return false;
    });
    EXPECT_EQ(checked.load(), (kRows + kBatch - 1) / kBatch);
    one_epoch(*single, d.x, d.labels);
    expect_weights_close(mirrored->get_weights(), single->get_weights(), opt);
  }
}

TEST(GpuTraining, WeightsAndOptimizerStateRoundTripThroughSaveAndLoad) {
  MDTRAIN_REQUIRE_GPU();
  const Data d = make_data(11);
  auto m = seed_model(one_gpu(), "adam", "sparse_categorical_crossentropy", "softmax", {"accuracy"});
  one_epoch(*m, d.x, d.labels);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("mdtrain_gpu_training_" + std::to_string(::getpid()) + ".mdtrain"))
          .string();
  m->save(path);
  auto loaded = Model::load(path, one_gpu());
  std::filesystem::remove(path);
  const auto a = m->get_weights(), b = loaded->get_weights();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(b[i].device().is_cpu());
    EXPECT_TRUE(gpu_testing::same_bytes(b[i], a[i])) << "weight " << i;
  }
  const auto sa = m->optimizer_state(), sb = loaded->optimizer_state();
  ASSERT_EQ(sa.size(), sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(gpu_testing::same_bytes(sb[i].second, sa[i].second)) << i;
  // Both continue identically on the GPU: the restored slots were copied to the device.
  one_epoch(*m, d.x, d.labels);
  one_epoch(*loaded, d.x, d.labels);
  const auto a2 = m->get_weights(), b2 = loaded->get_weights();
  for (std::size_t i = 0; i < a2.size(); ++i) EXPECT_TRUE(gpu_testing::same_bytes(b2[i], a2[i])) << "weight " << i;
  // set_weights reaches the GPU replica: training from the same weights twice gives the same result.
  loaded->set_weights(a);
  EXPECT_TRUE(gpu_testing::same_bytes(loaded->engine().replica_network(0).packed_values(),
                                      to_host(loaded->stack().packed_values())));
  const auto w = loaded->get_weights();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(gpu_testing::same_bytes(w[i], a[i])) << "set_weights " << i;
}

}  // namespace
}  // namespace mdtrain
