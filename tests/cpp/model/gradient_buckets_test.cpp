// Gradient buckets summed during backward (TrainEngine + GradientReducer's overlapped form) on
// CPU devices: whatever the bucket size, the weights are bit for bit those of one bucket, the
// replicas stay identical, and bucket collectives interleave correctly with the collectives a
// layer runs in backward (synchronized BatchNormalization), also on replicas that get no rows.
// On CPU devices the bucketed path runs when the update is not sharded: clipping by norm, a
// reduction to one device, or several workers.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/mirrored_strategy.h"

namespace mdtrain {
namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

struct Case {
  const char* name;
  const char* optimizer;  // a Keras optimizer config
  GradientReducer::Algorithm reduction;
};

std::shared_ptr<Strategy> mirrored(int replicas, GradientReducer::Algorithm reduction, std::size_t bucket_bytes) {
  std::vector<Device> devices;
  for (int i = 0; i < replicas; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  auto s = std::make_shared<MirroredStrategy>(devices, "auto", reduction);
  s->set_gradient_bucket_bytes(bucket_bytes);
  return s;
}

// Dense(8) -> synchronized BatchNormalization -> relu -> Dense(8) -> Dense(3, softmax): 187
// trainable floats, so 16-byte buckets make 47 of them, started from inside backward.
std::unique_ptr<Model> make_model(const Case& c, std::shared_ptr<Strategy> strategy) {
  auto m = std::make_unique<Model>("buckets", 5);
  Dense::Options o;
  o.units = 8;
  m->add(std::make_shared<Dense>("dense", o));
  BatchNormalization::Options bn;
  bn.synchronized = true;
  m->add(std::make_shared<BatchNormalization>("bn", bn));
  m->add(std::make_shared<ActivationLayer>("relu", "relu"));
  m->add(std::make_shared<Dense>("dense_1", o));
  o.units = 3;
  o.activation = "softmax";
  m->add(std::make_shared<Dense>("dense_2", o));
  m->build({6});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")),
             std::shared_ptr<Optimizer>(make_optimizer(Json::parse(c.optimizer))), {}, std::move(strategy));
  return m;
}

class GradientBuckets : public ::testing::TestWithParam<Case> {};

TEST_P(GradientBuckets, AnyBucketSizeGivesTheWeightsOfOneBucket) {
  const Case& c = GetParam();
  constexpr std::int64_t kRows = 14;
  Tensor x({kRows, 6}), y({kRows}, DType::Int32);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(gen);
  for (std::int64_t i = 0; i < kRows; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 3);
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);

  auto one_bucket = make_model(c, mirrored(3, c.reduction, 0));
  auto many = make_model(c, mirrored(3, c.reduction, 16));
  EXPECT_EQ(many->strategy()->gradient_bucket_bytes(), 16u);
  EXPECT_EQ(one_bucket->strategy()->gradient_bucket_bytes(), GradientReducer::kDefaultBucketBytes);
  const std::vector<Tensor> start = one_bucket->get_weights();
  int checked = 0;
  auto identical = [&](std::int64_t, const Logs&) {
    TrainEngine& e = many->engine();
    for (int r = 1; r < e.num_replicas(); ++r) {
      EXPECT_TRUE(bitwise_equal(e.replica_network(r).packed_values(), e.replica_network(0).packed_values()));
      EXPECT_TRUE(
          bitwise_equal(e.replica_network(r).non_trainable_values(), e.replica_network(0).non_trainable_values()));
    }
    ++checked;
    return false;
  };
  // Batches of 5 (uneven over 3 replicas) and of 2 and 1 (replicas with no rows).
  for (std::int64_t batch : {5, 2, 1}) {
    const std::int64_t steps = (kRows + batch - 1) / batch;
    one_bucket->train_epoch(x, y, order.data(), kRows, batch, steps, nullptr);
    many->train_epoch(x, y, order.data(), kRows, batch, steps, identical);
  }
  EXPECT_EQ(checked, 3 + 7 + 14);
  const auto a = one_bucket->get_weights(), b = many->get_weights();
  ASSERT_EQ(a.size(), b.size());
  bool moved = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(a[i], b[i])) << "weight " << i;
    moved = moved || !bitwise_equal(a[i], start[i]);
  }
  EXPECT_TRUE(moved);
}

INSTANTIATE_TEST_SUITE_P(
    Paths, GradientBuckets,
    ::testing::Values(Case{"clipnorm_all_reduce",
                           R"({"class_name": "Adam", "config": {"learning_rate": 0.01, "clipnorm": 1.0}})",
                           GradientReducer::Algorithm::AllReduce},
                      Case{"reduce_to_one_device", R"({"class_name": "SGD", "config": {"learning_rate": 0.1}})",
                           GradientReducer::Algorithm::ReduceToOne}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mdtrain
