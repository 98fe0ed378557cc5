// WavefrontStrategy (strategy/wavefront_strategy.h, wavefront_executor.h): a model whose recurrent
// stack is trained by Model::train_epoch over 2 and 4 logical devices in time chunks ends with the
// weights and optimizer state of the one-device model (float32 rounding: the chunked weight-gradient
// sums), its optimizer counting one iteration per batch; evaluation and prediction are one device's;
// bad chunks, meshes and stacks it cannot cut are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/gru.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/lstm.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/wavefront_executor.h"
#include "mdtrain/strategy/wavefront_strategy.h"

namespace mdtrain {
namespace {

constexpr std::int64_t kRows = 13, kBatch = 5;  // batches of 5, 5, 3

std::vector<Device> cpus(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  return devices;
}

std::shared_ptr<WavefrontStrategy> wavefront(int devices, std::int64_t chunk) {
  return std::make_shared<WavefrontStrategy>(DeviceMesh({devices}, {"pipe"}, cpus(devices)), chunk);
}

std::unique_ptr<Model> make_model(std::shared_ptr<Strategy> strategy, const std::string& optimizer,
                                  bool gru_in_the_middle) {
  auto m = std::make_unique<Model>("m", 123);
  for (int i = 0; i < 4; ++i) {
    RecurrentLayer::Options o;
    o.units = 6;
    o.return_sequences = true;
    const std::string name = "rnn" + std::to_string(i);
    if (gru_in_the_middle && i == 2) m->add(std::make_shared<GRU>(name, o));
    else m->add(std::make_shared<LSTM>(name, o));
  }
  Dense::Options d;
  d.units = 2;
  m->add(std::make_shared<Dense>("head", d));
  m->build({7, 3});
  m->compile(std::shared_ptr<Loss>(make_loss("mse")), std::shared_ptr<Optimizer>(make_optimizer(optimizer)), {},
             std::move(strategy));
  return m;
}

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
  Tensor t(shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

const Tensor& data_x() {
  static const Tensor x = random_tensor({kRows, 7, 3}, 7);
  return x;
}
const Tensor& data_y() {
  static const Tensor y = random_tensor({kRows, 7, 2}, 8);
  return y;
}

std::vector<double> train(Model& m, int epochs) {
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> losses;
  for (int e = 0; e < epochs; ++e)
    losses.push_back(
        m.train_epoch(data_x(), data_y(), order.data(), kRows, kBatch, (kRows + kBatch - 1) / kBatch, nullptr)
            .logs.front()
            .second);
  return losses;
}

double worst_gap(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    worst = std::max(worst, std::abs(x - y) / (1 + std::abs(y)));
  }
  return worst;
}

void expect_same_as_one_device(int devices, std::int64_t chunk, const char* optimizer, bool gru) {
  auto reference = make_model(nullptr, optimizer, gru);
  auto strategy = wavefront(devices, chunk);
  auto piped = make_model(strategy, optimizer, gru);
  const auto want_losses = train(*reference, 2), got_losses = train(*piped, 2);
  for (std::size_t e = 0; e < want_losses.size(); ++e)
    EXPECT_NEAR(got_losses[e], want_losses[e], 1e-5 * std::fabs(want_losses[e]) + 1e-7) << "epoch " << e;
  EXPECT_EQ(piped->optimizer().iterations(), 6);  // 2 epochs of 3 batches, by the model's optimizer
  const auto want = reference->get_weights(), got = piped->get_weights();
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_LE(worst_gap(got[i], want[i]), 2e-5) << "weight " << i;
  const auto want_state = reference->optimizer_state(), got_state = piped->optimizer_state();
  ASSERT_EQ(want_state.size(), got_state.size());
  for (std::size_t i = 1; i < want_state.size(); ++i) {
    EXPECT_EQ(want_state[i].first, got_state[i].first);
    EXPECT_LE(worst_gap(got_state[i].second, want_state[i].second), 1e-4) << want_state[i].first;
  }
  const Tensor a = piped->predict(data_x(), kBatch), b = reference->predict(data_x(), kBatch);
  EXPECT_LE(worst_gap(a, b), 2e-5);
  // Prediction runs one device's forward: from the same weights, bitwise its outputs.
  piped->set_weights(want);
  const Tensor same = piped->predict(data_x(), kBatch);
  ASSERT_EQ(same.shape(), b.shape());
  EXPECT_EQ(std::memcmp(same.raw(), b.raw(), b.nbytes()), 0);
  ASSERT_NE(strategy->executor(), nullptr);
  EXPECT_EQ(strategy->executor()->num_stages(), devices);
}

TEST(Wavefront, TwoDevicesMatchOneDevice) { expect_same_as_one_device(2, 3, "adam", false); }
TEST(Wavefront, FourDevicesMatchOneDeviceWithUnevenChunks) { expect_same_as_one_device(4, 2, "sgd", true); }
TEST(Wavefront, ChunkLongerThanTheSequence) { expect_same_as_one_device(2, 100, "sgd", false); }

TEST(Wavefront, StageCut) {
  auto strategy = wavefront(3, 2);
  auto m = make_model(strategy, "sgd", false);
  train(*m, 1);
  EXPECT_EQ(strategy->executor()->stage_starts(), (std::vector<int>{0, 2, 3}));
}

TEST(Wavefront, RefusesABadChunkMeshAndANonRecurrentStage) {
  try {
    wavefront(2, 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("time_chunk"), std::string::npos) << e.what();
  }
  EXPECT_THROW(WavefrontStrategy(DeviceMesh({1, 2}, {"batch", "pipe"}, cpus(2)), 2), std::invalid_argument);
  auto m = make_model(wavefront(5, 4), "sgd", false);
  try {
    train(*m, 1);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"head\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mdtrain
