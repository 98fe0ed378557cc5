// Where the optimizer state lives, through the C++ Model API. CentralStorageStrategy: weights
// bitwise those of Mirrored with ReductionToOneDevice, the state held once (by the parameter
// device's replica), the replicas refreshed from the stored weights every step, argument errors.
// MirroredStrategy's ZeRO-1: each replica holds its range's share of the state only.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/central_storage_strategy.h"
#include "mdtrain/strategy/mirrored_strategy.h"

namespace mdtrain {
namespace {

constexpr std::int64_t kFeatures = 5, kClasses = 3, kRows = 97;  // 97: uneven batches of 20

std::vector<Device> cpus(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  return devices;
}

std::unique_ptr<Model> make_model(std::shared_ptr<Strategy> strategy) {
  auto m = std::make_unique<Model>("mlp", 7);
  Dense::Options hidden;
  hidden.units = 12;
  hidden.activation = "relu";
  m->add(std::make_shared<Dense>("dense", hidden));
  m->add(std::make_shared<Dropout>("dropout", 0.2, 5));
  Dense::Options out;
  out.units = kClasses;
  out.activation = "softmax";
  m->add(std::make_shared<Dense>("dense_1", out));
  m->build({kFeatures});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")), make_optimizer("adam"), {"accuracy"},
             std::move(strategy));
  return m;
}

struct Data {
  Tensor x{{kRows, kFeatures}, DType::Float32}, y{{kRows}, DType::Int32};
  Data() {
    std::mt19937_64 rng(3);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    for (std::int64_t i = 0; i < kRows; ++i) {
      y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % kClasses);
      for (std::int64_t f = 0; f < kFeatures; ++f)
        x.data<float>()[i * kFeatures + f] = noise(rng) + static_cast<float>((i % kClasses) == f);
    }
  }
};

void train(Model& m, const Data& d, int epochs) {
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  for (int e = 0; e < epochs; ++e) m.train_epoch(d.x, d.y, order.data(), kRows, 20, (kRows + 19) / 20, nullptr);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(CentralStorage, WeightsAreBitwiseThoseOfMirroredReducingToOneDevice) {
  const Data d;
  auto central = make_model(std::make_shared<CentralStorageStrategy>(cpus(3), Device{DeviceKind::CPU, 0}));
  auto mirrored =
      make_model(std::make_shared<MirroredStrategy>(cpus(3), "auto", GradientReducer::Algorithm::ReduceToOne));
  train(*central, d, 3);
  train(*mirrored, d, 3);
  const auto a = central->get_weights(), b = mirrored->get_weights();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i], b[i])) << "weight " << i;
  const auto sa = central->optimizer_state(), sb = mirrored->optimizer_state();
  ASSERT_EQ(sa.size(), sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(bitwise_equal(sa[i].second, sb[i].second)) << sa[i].first;
}

TEST(CentralStorage, TheOptimizerStateLivesOnceOnTheParameterDevice) {
  const Data d;
  auto m = make_model(std::make_shared<CentralStorageStrategy>(cpus(3), Device{DeviceKind::CPU, 0}));
  train(*m, d, 1);
  TrainEngine& engine = m->engine();
  // Adam: momentum and velocity for 5*12 + 12 + 12*3 + 3 float32 parameters, all on replica 0.
  const std::int64_t params = kFeatures * 12 + 12 + 12 * kClasses + kClasses;
  EXPECT_EQ(engine.optimizer_state_bytes(), (std::vector<std::int64_t>{2 * params * 4, 0, 0}));
  // Every replica starts the next step from the stored weights.
  for (int r = 1; r < engine.num_replicas(); ++r)
    EXPECT_TRUE(bitwise_equal(engine.replica_network(r).packed_values(), engine.replica_network(0).packed_values()))
        << "replica " << r;
  EXPECT_EQ(engine.optimizer().iterations(), (kRows + 19) / 20);
}

TEST(MirroredZero1, EachReplicaHoldsItsShareOfTheOptimizerState) {
  const Data d;
  for (auto reduction : {GradientReducer::Algorithm::AllReduce, GradientReducer::Algorithm::ReduceToOne}) {
    auto m = make_model(std::make_shared<MirroredStrategy>(cpus(3), "auto", reduction));
    train(*m, d, 1);
    const auto bytes = m->engine().optimizer_state_bytes();
    const std::int64_t params = kFeatures * 12 + 12 + 12 * kClasses + kClasses;  // 111
    const std::int64_t shard = ((params + 2) / 3 + 15) / 16 * 16;                // 48 (ZeroShards)
    EXPECT_EQ(bytes, (std::vector<std::int64_t>{2 * shard * 4, 2 * shard * 4, 2 * (params - 2 * shard) * 4}));
    // The stitched state is whole: it restores into a single-device model that trains on alike.
    auto single = make_model(std::make_shared<MirroredStrategy>(cpus(1)));
    single->set_weights(m->get_weights());
    single->set_optimizer_state(m->optimizer_state());
    train(*single, d, 1);
    train(*m, d, 1);
    const auto a = single->get_weights(), b = m->get_weights();
    for (std::size_t i = 0; i < a.size(); ++i)
      for (std::int64_t e = 0; e < a[i].numel(); ++e)
        EXPECT_NEAR(a[i].data<float>()[e], b[i].data<float>()[e], 1e-4) << "weight " << i << " element " << e;
  }
}

TEST(CentralStorage, BadDevicesAreClearErrors) {
  const auto message = [](const std::vector<Device>& compute, const Device& parameter) {
    try {
      CentralStorageStrategy s(compute, parameter);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({}, Device{DeviceKind::CPU, 0}).find("compute_devices must not be empty"), std::string::npos);
  EXPECT_NE(message({Device{DeviceKind::CUDA, 0}}, Device{DeviceKind::CPU, 0}).find("only logical CPU devices"),
            std::string::npos);
  EXPECT_NE(message(cpus(2), Device{DeviceKind::CPU, 1}).find("parameter_device must be the host"), std::string::npos);
  EXPECT_EQ(message(cpus(2), Device{DeviceKind::CPU, 0}), "no error");
}

}  // namespace
}  // namespace mdtrain
