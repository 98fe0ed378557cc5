// Communication overlapped with backward on GPUs (label "gpu"): gradient buckets enqueued on the
// NCCL communication stream while backward runs give the blocking sums; MirroredStrategy on two
// GPUs gives the same weights with any bucket size; a GPU replica's host weights are refreshed
// when read, not after every step. They skip, printing why, without GPUs.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "mdtrain/distribute/gradient_reducer.h"
#include "mdtrain/distribute/registry.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/mirrored_strategy.h"
#include "mdtrain/strategy/one_device_strategy.h"

namespace mdtrain {
namespace {

using gpu_testing::same_bytes;
using gpu_testing::to_host;

#define MDTRAIN_REQUIRE_TWO_GPUS()                                                           \
  do {                                                                                       \
    MDTRAIN_REQUIRE_REAL_GPU();                                                              \
    if (::mdtrain::cuda::device_count() < 2)                                                 \
      GTEST_SKIP() << "needs 2 GPUs, this process sees " << ::mdtrain::cuda::device_count(); \
  } while (0)

TEST(GpuGradientBuckets, BucketsEnqueuedDuringBackwardGiveTheSums) {
  MDTRAIN_REQUIRE_TWO_GPUS();
  constexpr std::int64_t kTotal = 10007;  // 10 buckets of 1024 floats, the last one short
  auto comms = create_communicators("nccl", 2);
  std::vector<Tensor> host, device;
  for (int r = 0; r < 2; ++r) {
    host.push_back(gpu_testing::random_tensor({kTotal}, DType::Float32, 10u + static_cast<unsigned>(r)));
    device.emplace_back(Shape{kTotal}, DType::Float32, Device{DeviceKind::CUDA, r});
    device.back().copy_from(host.back());
  }
  std::vector<bool> enqueued(2, false);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      GradientReducer reducer(*comms[static_cast<std::size_t>(r)], 1024 * sizeof(float));
      Tensor& g = device[static_cast<std::size_t>(r)];
      enqueued[static_cast<std::size_t>(r)] = reducer.enqueues(g);
      reducer.begin(g);
      for (std::int64_t layer_start : {9000, 5000, 4999, 1000, 0}) reducer.gradients_final_from(layer_start);
      reducer.finish();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(enqueued[0] && enqueued[1]) << "NCCL with GPU gradients must enqueue on the communication stream";
  // Two addends: a + b is the same whichever rank adds, so every element is exact.
  Tensor expected({kTotal}, DType::Float32);
  for (std::int64_t i = 0; i < kTotal; ++i)
    expected.data<float>()[i] = host[0].data<float>()[i] + host[1].data<float>()[i];
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(same_bytes(device[static_cast<std::size_t>(r)], expected)) << "rank " << r;
}

std::unique_ptr<Model> mlp(std::shared_ptr<Strategy> strategy) {
  auto m = std::make_unique<Model>("mlp", 3);
  Dense::Options o;
  o.units = 64;
  o.activation = "relu";
  m->add(std::make_shared<Dense>("dense", o));
  m->add(std::make_shared<Dense>("dense_1", o));
  o.units = 10;
  o.activation = "softmax";
  m->add(std::make_shared<Dense>("dense_2", o));
  m->build({20});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")),
             std::shared_ptr<Optimizer>(make_optimizer(Json("adam"))), {}, std::move(strategy));
  return m;
}

struct Batches {
  Tensor x{Shape{96, 20}}, y{Shape{96}, DType::Int32};
  std::vector<std::int64_t> order = std::vector<std::int64_t>(96);
  Batches() {
    x = gpu_testing::random_tensor({96, 20}, DType::Float32, 5);
    for (std::int64_t i = 0; i < 96; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 10);
    std::iota(order.begin(), order.end(), 0);
  }
  void epoch(Model& m) { m.train_epoch(x, y, order.data(), 96, 32, 3, nullptr); }
};

TEST(GpuGradientBuckets, MirroredOnTwoGpusGivesTheSameWeightsWithAnyBucketSize) {
  MDTRAIN_REQUIRE_TWO_GPUS();
  auto strategy = [](std::size_t bucket_bytes) {
    auto s = std::make_shared<MirroredStrategy>(std::vector<Device>{{DeviceKind::CUDA, 0}, {DeviceKind::CUDA, 1}});
    s->set_gradient_bucket_bytes(bucket_bytes);
    return s;
  };
  auto one_bucket = mlp(strategy(0)), small_buckets = mlp(strategy(1024));
  Batches b;
  b.epoch(*one_bucket);
  b.epoch(*small_buckets);
  const auto a = one_bucket->get_weights(), c = small_buckets->get_weights();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bytes(c[i], a[i])) << "weight " << i;
}

TEST(GpuGradientBuckets, HostWeightsAreRefreshedWhenReadNotAfterEveryStep) {
  MDTRAIN_REQUIRE_REAL_GPU();
  auto m = mlp(std::make_shared<OneDeviceStrategy>(Device{DeviceKind::CUDA, 0}));
  Batches b;
  const Tensor before = m->stack().packed_values().clone();
  // The layer objects hold the host weights (what Python's layer.get_weights reads through
  // Model::refresh_weights).
  const std::shared_ptr<Layer> first = m->stack().layers().front();
  b.epoch(*m);
  TrainEngine& e = m->engine();
  EXPECT_TRUE(e.primary_stale());
  // Training did not copy the weights back...
  EXPECT_TRUE(same_bytes(first->parameters()[0]->value, before.rows(0, 20 * 64).reshape({20, 64})));
  // ...reading them brings them up to date.
  const auto w = m->get_weights();
  EXPECT_FALSE(e.primary_stale());
  EXPECT_TRUE(same_bytes(m->stack().packed_values(), to_host(e.replica_network(0).packed_values())));
  EXPECT_FALSE(same_bytes(m->stack().packed_values(), before));
  // Recompiling keeps what was trained.
  const Tensor trained = m->stack().packed_values().clone();
  b.epoch(*m);
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")),
             std::shared_ptr<Optimizer>(make_optimizer(Json("sgd"))), {},
             std::make_shared<OneDeviceStrategy>(Device{DeviceKind::CUDA, 0}));
  EXPECT_FALSE(same_bytes(m->stack().packed_values(), trained)) << "the second epoch's training was lost";
}

}  // namespace
}  // namespace mdtrain
