// Recurrent layers split by units over the model axis (nn/tensor_parallel/unit_parallel_recurrent.h):
// Keras's gate-major columns are cut per gate; LSTM -> GRU -> SimpleRNN trained on 2 model shards
// and on a 2 x 2 batch x model mesh, with dropout and recurrent_dropout, give the one-device
// weights and optimizer state to float32 rounding, and two runs are bitwise equal.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/gru.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/lstm.h"
#include "mdtrain/nn/simple_rnn.h"
#include "mdtrain/nn/tensor_parallel/unit_parallel_recurrent.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/model_parallel_strategy.h"

namespace mdtrain {
namespace {

constexpr std::int64_t kRows = 29, kBatch = 7, kSteps = 5, kFeatures = 3;

TEST(GateUnits, EachShardTakesItsUnitsOfEveryGate) {
  // LSTM-like: 2 rows, 4 gates of 4 units; element (r, g * 4 + j) = 100 r + 10 g + j.
  Tensor whole({2, 16}, DType::Float32);
  for (int r = 0; r < 2; ++r)
    for (int g = 0; g < 4; ++g)
      for (int j = 0; j < 4; ++j) whole.data<float>()[r * 16 + g * 4 + j] = static_cast<float>(100 * r + 10 * g + j);
  Tensor part({2, 8}, DType::Float32), back = Tensor::zeros({2, 16}, DType::Float32);
  for (int k = 0; k < 2; ++k) {
    copy_gate_units_out(whole, 4, k, 2, part);
    for (int r = 0; r < 2; ++r)
      for (int g = 0; g < 4; ++g)
        for (int j = 0; j < 2; ++j)
          EXPECT_EQ(part.data<float>()[r * 8 + g * 2 + j], static_cast<float>(100 * r + 10 * g + 2 * k + j));
    copy_gate_units_in(part, 4, k, 2, back);
  }
  EXPECT_EQ(std::memcmp(back.raw(), whole.raw(), whole.nbytes()), 0);
}

std::vector<Device> cpus(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  return devices;
}

RecurrentLayer::Options recurrent(std::int64_t units, bool sequences, double dropout) {
  RecurrentLayer::Options o;
  o.units = units;
  o.return_sequences = sequences;
  o.dropout = dropout;
  o.recurrent_dropout = dropout;
  o.seed = 17;
  o.kernel_regularizer = Json::parse(R"({"class_name": "L2", "config": {"l2": 0.01}})");
  return o;
}

const WeightLayout kUnits{std::nullopt, std::string("model")};

std::unique_ptr<Model> make_model(std::shared_ptr<Strategy> strategy, double dropout) {
  auto m = std::make_unique<Model>("m", 5);
  m->add(std::make_shared<LSTM>("lstm", recurrent(8, true, dropout)));
  RecurrentLayer::Options backwards = recurrent(6, true, dropout);
  backwards.go_backwards = true;
  m->add(std::make_shared<GRU>("gru", backwards));
  m->add(std::make_shared<SimpleRNN>("simple_rnn", recurrent(4, false, dropout)));
  Dense::Options out;
  out.units = 3;
  out.activation = "softmax";
  m->add(std::make_shared<Dense>("dense", out));
  m->build({kSteps, kFeatures});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")), make_optimizer("adam"), {},
             std::move(strategy));
  return m;
}

std::shared_ptr<Strategy> split(bool hybrid) {
  WeightLayouts layouts = {{"lstm/kernel", kUnits}, {"gru/kernel", kUnits}, {"simple_rnn/kernel", kUnits}};
  if (hybrid)
    return std::make_shared<ModelParallelStrategy>(DeviceMesh({2, 2}, {"batch", "model"}, cpus(4)), layouts,
                                                   std::optional<std::string>("batch"));
  return std::make_shared<ModelParallelStrategy>(DeviceMesh({2}, {"model"}, cpus(2)), layouts, std::nullopt);
}

std::vector<Tensor> train(Model& m, Optimizer::State* state) {
  Tensor x({kRows, kSteps, kFeatures}, DType::Float32), y({kRows}, DType::Int32);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = noise(rng);
  for (std::int64_t i = 0; i < kRows; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7) % 3);
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  for (int e = 0; e < 2; ++e) m.train_epoch(x, y, order.data(), kRows, kBatch, (kRows + kBatch - 1) / kBatch, nullptr);
  if (state) *state = m.optimizer_state();
  return m.get_weights();
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

class UnitParallelRecurrentMatchesOneDevice : public ::testing::TestWithParam<std::tuple<bool, double>> {};

TEST_P(UnitParallelRecurrentMatchesOneDevice, WeightsAndOptimizerStateAfterTraining) {
  const auto [hybrid, dropout] = GetParam();
  Optimizer::State want_state, got_state, again_state;
  auto one = make_model(nullptr, dropout);
  const auto want = train(*one, &want_state);
  auto model = make_model(split(hybrid), dropout);
  const auto got = train(*model, &got_state);
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_LE(worst_gap(got[i], want[i]), 1e-6) << "weight " << i;
  ASSERT_EQ(want_state.size(), got_state.size());
  for (std::size_t i = 1; i < want_state.size(); ++i)
    EXPECT_LE(worst_gap(got_state[i].second, want_state[i].second), 1e-6) << want_state[i].first;
  auto again = make_model(split(hybrid), dropout);
  const auto repeat = train(*again, &again_state);
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(std::memcmp(got[i].raw(), repeat[i].raw(), got[i].nbytes()), 0) << "weight " << i;
}

INSTANTIATE_TEST_SUITE_P(ModelAndHybridMeshes, UnitParallelRecurrentMatchesOneDevice,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(0.0, 0.3)));

TEST(UnitParallelRecurrent, RecurrentKernelSplitByRowsIsRefused) {
  WeightLayouts layouts = {{"lstm/kernel", kUnits}, {"lstm/recurrent_kernel", {std::string("model"), std::nullopt}}};
  try {
    auto m =
        make_model(std::make_shared<ModelParallelStrategy>(DeviceMesh({2}, {"model"}, cpus(2)), layouts, std::nullopt),
                   0.0);
    train(*m, nullptr);  // the layouts are checked at the latest before the first step
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[model_parallel] layer 'lstm' (LSTM)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("recurrent_kernel is (None, 'model')"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mdtrain
