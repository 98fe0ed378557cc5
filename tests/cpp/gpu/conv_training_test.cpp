// A small CNN trained end to end on GPUs (label "gpu"): Conv2D, MaxPooling2D, Conv2D, then
// AveragePooling2D + Flatten, GlobalAveragePooling2D or GlobalMaxPooling2D, then Dense; and its
// 1-D form on the images' rows as sequences (Conv1D with causal padding, the 1-D pools,
// GlobalAveragePooling1D). One epoch on one GPU against the
// same model on the CPU; MirroredStrategy on two GPUs keeping replicas bitwise identical after every
// step and matching one GPU. The two models between them take every conv kernel through training:
// same and valid padding, strides 2, dilation 2, overlapping max-pool windows (whose backward
// adds several gradients into one element), and a Conv2D run in chunks of output rows (the
// row-range im2col and col2im). They skip, printing why, without a GPU; MDTRAIN_GPU_TESTS_ON_CPU=1
// runs them with CPU devices in place of GPUs (a check of the tests, not of CUDA).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "gpu/training_util.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/conv1d.h"
#include "mdtrain/nn/conv2d.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/global_average_pooling1d.h"
#include "mdtrain/nn/global_average_pooling2d.h"
#include "mdtrain/nn/global_max_pooling.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/pooling1d.h"
#include "mdtrain/nn/pooling2d.h"
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

constexpr std::int64_t kRows = 64, kSide = 12, kChannels = 2, kClasses = 3, kBatch = 16;

struct Data {
  Tensor x, labels;
};

// Class c brightens a quadrant-sized blob at a class-specific place of channel c % 2, over noise.
Data make_data(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.5);
  Data d{Tensor({kRows, kSide, kSide, kChannels}, DType::Float32), Tensor({kRows}, DType::Int32)};
  float* x = d.x.data<float>();
  for (std::int64_t i = 0; i < kRows; ++i) {
    const int c = static_cast<int>(i % kClasses);
    d.labels.data<std::int32_t>()[i] = c;
    for (std::int64_t h = 0; h < kSide; ++h)
      for (std::int64_t w = 0; w < kSide; ++w)
        for (std::int64_t ch = 0; ch < kChannels; ++ch) {
          const bool blob = ch == c % 2 && h / 4 == c && w / 6 == c % 2;
          x[((i * kSide + h) * kSide + w) * kChannels + ch] = static_cast<float>((blob ? 1.5 : 0.0) + noise(rng));
        }
  }
  return d;
}

std::shared_ptr<Conv2D> conv(const char* name, std::int64_t filters, const char* padding, std::int64_t stride,
                             std::int64_t dilation) {
  Conv2D::Options o;
  o.filters = filters;
  o.kernel_size = {3, 3};
  o.padding = padding;
  o.strides = {stride, stride};
  o.dilation_rate = {dilation, dilation};
  o.activation = "relu";
  return std::make_shared<Conv2D>(name, o);
}

std::shared_ptr<Layer> pool(bool max, std::int64_t size, std::int64_t stride, const char* padding) {
  Pooling2D::Options o;
  o.pool_size = {size, size};
  o.strides = {stride, stride};
  o.padding = padding;
  if (max) return std::make_shared<MaxPooling2D>("max_pooling2d", o);
  return std::make_shared<AveragePooling2D>("average_pooling2d", o);
}

std::shared_ptr<Conv1D> conv1d(const char* name, std::int64_t filters, const char* padding, std::int64_t dilation) {
  Conv2D::Options o;
  o.filters = filters;
  o.kernel_size = {3};
  o.padding = padding;
  o.strides = {1};
  o.dilation_rate = {dilation};
  o.activation = "relu";
  return std::make_shared<Conv1D>(name, o);
}

std::shared_ptr<Layer> pool1d(bool max, std::int64_t size, std::int64_t stride, const char* padding) {
  Pooling2D::Options o;
  o.pool_size = {size};
  o.strides = {stride};
  o.padding = padding;
  if (max) return std::make_shared<MaxPooling1D>("max_pooling1d", o);
  return std::make_shared<AveragePooling1D>("average_pooling1d", o);
}

enum class Head { AveragePooling, GlobalAveragePooling, GlobalMaxPooling, Sequence };

// AveragePooling: Conv2D(4, same) 12x12 -> MaxPooling2D(2) 6x6 -> Conv2D(6, valid, in chunks of
//   one output row) 4x4 -> AveragePooling2D(3, strides 2, same) 2x2 -> Flatten -> Dense(3, softmax).
// GlobalAveragePooling: Conv2D(4, same, strides 2) 6x6 -> MaxPooling2D(3, strides 1, same) 6x6 ->
//   Conv2D(6, same, dilation 2) 6x6 -> GlobalAveragePooling2D -> Dense(3, softmax).
// GlobalMaxPooling: the same with GlobalMaxPooling2D.
// Sequence: each image as 12 steps of 24 channels: Conv1D(4, causal) -> MaxPooling1D(2) 6 ->
//   Conv1D(6, same, dilation 2) -> AveragePooling1D(2, strides 1, same) -> GlobalAveragePooling1D
//   -> Dense(3, softmax).
std::unique_ptr<Model> small_cnn(Head head, std::shared_ptr<Strategy> strategy, const std::string& optimizer) {
  auto m = std::make_unique<Model>("small_cnn", 77);
  if (head == Head::AveragePooling) {
    m->add(conv("conv2d", 4, "same", 1, 1));
    m->add(pool(true, 2, 2, "valid"));
    auto chunked = conv("conv2d_1", 6, "valid", 1, 1);
    chunked->set_column_budget_bytes(1);  // one output row per chunk: the row-range kernels
    m->add(chunked);
    m->add(pool(false, 3, 2, "same"));
    m->add(std::make_shared<Flatten>("flatten"));
  } else if (head == Head::Sequence) {
    m->add(conv1d("conv1d", 4, "causal", 1));
    m->add(pool1d(true, 2, 2, "valid"));
    m->add(conv1d("conv1d_1", 6, "same", 2));
    m->add(pool1d(false, 2, 1, "same"));
    m->add(std::make_shared<GlobalAveragePooling1D>("global_average_pooling1d"));
  } else {
    m->add(conv("conv2d", 4, "same", 2, 1));
    m->add(pool(true, 3, 1, "same"));
    m->add(conv("conv2d_1", 6, "same", 1, 2));
    if (head == Head::GlobalMaxPooling) m->add(std::make_shared<GlobalMaxPooling2D>("global_max_pooling2d"));
    else m->add(std::make_shared<GlobalAveragePooling2D>("global_average_pooling2d"));
  }
  Dense::Options out;
  out.units = kClasses;
  out.activation = "softmax";
  m->add(std::make_shared<Dense>("dense", out));
  if (head == Head::Sequence) m->build({kSide, kSide * kChannels});
  else m->build({kSide, kSide, kChannels});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")),
             std::shared_ptr<Optimizer>(make_optimizer(optimizer)), {"accuracy"}, std::move(strategy));
  return m;
}

// The images, or for the Sequence head the same memory as (rows, steps, channels) sequences.
Data inputs_for(Head head, const Data& d) {
  if (head != Head::Sequence) return d;
  return {d.x.reshape({kRows, kSide, kSide * kChannels}), d.labels};
}

Model::EpochResult one_epoch(Model& m, const Data& d, const Model::BatchCallback& cb = nullptr) {
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));
  return m.train_epoch(d.x, d.labels, order.data(), kRows, kBatch, kRows / kBatch, cb);
}

const char* head_name(Head head) {
  switch (head) {
    case Head::AveragePooling: return "AveragePooling";
    case Head::GlobalAveragePooling: return "GlobalAveragePooling";
    case Head::GlobalMaxPooling: return "GlobalMaxPooling";
    case Head::Sequence: return "Sequence";
  }
  return "?";
}
void PrintTo(Head head, std::ostream* os) { *os << head_name(head); }  // for gtest's messages

class SmallCnnOnGpu : public ::testing::TestWithParam<Head> {};

TEST_P(SmallCnnOnGpu, OneEpochOnOneGpuMatchesTheCpu) {
  MDTRAIN_REQUIRE_GPU();
  const Data d = inputs_for(GetParam(), make_data(3));
  for (const char* opt : {"sgd", "adam"}) {
    const std::string what = std::string(head_name(GetParam())) + " " + opt;
    auto on_cpu = small_cnn(GetParam(), std::make_shared<OneDeviceStrategy>(Device{}), opt);
    auto on_gpu = small_cnn(GetParam(), std::make_shared<OneDeviceStrategy>(kGpu), opt);
    // The same initial weights, or the comparison below means nothing.
    const auto w0_cpu = on_cpu->get_weights(), w0_gpu = on_gpu->get_weights();
    for (std::size_t i = 0; i < w0_cpu.size(); ++i) ASSERT_TRUE(gpu_testing::same_bytes(w0_gpu[i], w0_cpu[i])) << i;
    const auto want = one_epoch(*on_cpu, d), got = one_epoch(*on_gpu, d);
    ASSERT_EQ(got.steps, kRows / kBatch) << what;
    EXPECT_NEAR(log_of(got.logs, "loss"), log_of(want.logs, "loss"), 1e-4) << what;
    EXPECT_NEAR(log_of(got.logs, "accuracy"), log_of(want.logs, "accuracy"), 1.0 / kRows + 1e-12) << what;
    const auto w_cpu = on_cpu->get_weights();
    expect_weights_close(on_gpu->get_weights(), w_cpu, what);
    // Training moved every weight: a model whose conv layers did not train would fail here.
    for (std::size_t i = 0; i < w_cpu.size(); ++i)
      EXPECT_FALSE(gpu_testing::same_bytes(w_cpu[i], w0_cpu[i])) << what << ": weight " << i << " did not change";
    // Evaluation runs the forward pass on the GPU replica too.
    const Logs e_gpu = on_gpu->evaluate(d.x, d.labels, kBatch, nullptr);
    const Logs e_cpu = on_cpu->evaluate(d.x, d.labels, kBatch, nullptr);
    EXPECT_NEAR(log_of(e_gpu, "loss"), log_of(e_cpu, "loss"), 1e-4) << what << " evaluate";
  }
}

TEST_P(SmallCnnOnGpu, MirroredOnTwoGpusKeepsReplicasIdenticalAndMatchesOneGpu) {
  MDTRAIN_REQUIRE_GPU();
  if (!gpu_testing::harness_on_cpu() && cuda::device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, this process sees " << cuda::device_count();
  const Data d = inputs_for(GetParam(), make_data(9));
  auto single = small_cnn(GetParam(), std::make_shared<OneDeviceStrategy>(kGpu), "adam");
  auto mirrored = small_cnn(GetParam(), two_gpus(), "adam");
  std::atomic<int> checked{0};
  Model& m = *mirrored;
  one_epoch(m, d, [&m, &checked](std::int64_t step, const Logs&) {
    TrainEngine& e = m.engine();
    const Tensor r0 = to_host(e.replica_network(0).packed_values());
    for (int r = 1; r < e.num_replicas(); ++r)
      EXPECT_TRUE(gpu_testing::same_bytes(e.replica_network(r).packed_values(), r0))
          << "replica " << r << " differs from replica 0 after step " << step;
    ++checked;
    return false;
  });
  EXPECT_EQ(checked.load(), kRows / kBatch);
  one_epoch(*single, d);
  // Two replicas add their halves' gradients in another order than one device: rounding only.
  expect_weights_close(mirrored->get_weights(), single->get_weights(), head_name(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(EveryHead, SmallCnnOnGpu,
                         ::testing::Values(Head::AveragePooling, Head::GlobalAveragePooling, Head::GlobalMaxPooling,
                                           Head::Sequence),
                         [](const ::testing::TestParamInfo<Head>& info) { return std::string(head_name(info.param)); });

}  // namespace
}  // namespace mdtrain
