// The C++ Model API end to end: build, compile, train_epoch on a separable problem, save/load
// resuming bit for bit, OneDevice vs Mirrored strategies (replicas bitwise identical after every
// step, results equal to the single replica up to float32 rounding), uneven and tiny batches, and
// the argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/mirrored_strategy.h"
#include "mdtrain/strategy/one_device_strategy.h"

namespace mdtrain {
namespace {

constexpr std::int64_t kFeatures = 4, kClasses = 3;

struct Data {
  Tensor x, y;
  std::int64_t size() const { return x.dim(0); }
};

// Three Gaussian blobs, well apart: a problem a small MLP separates in a few epochs.
Data blobs(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.6);
  const double centers[kClasses][kFeatures] = {{2, 0, -1, 1}, {-2, 1, 1, -1}, {0, -2, 2, 0}};
  Data d{Tensor({n, kFeatures}, DType::Float32), Tensor({n}, DType::Int32)};
  for (std::int64_t i = 0; i < n; ++i) {
    const int c = static_cast<int>(i % kClasses);
    d.y.data<std::int32_t>()[i] = c;
    for (std::int64_t f = 0; f < kFeatures; ++f)
      d.x.data<float>()[i * kFeatures + f] = static_cast<float>(centers[c][f] + noise(rng));
  }
  return d;
}

// Dense(16, relu) [-> Dropout(0.25)] -> Dense(3, softmax), compiled with Keras names.
std::unique_ptr<Model> make_model(std::uint64_t seed, bool dropout, std::shared_ptr<Strategy> strategy,
                                  const Json& optimizer = "adam", double learning_rate = 0.01) {
  auto m = std::make_unique<Model>("mlp", seed);
  Dense::Options hidden;
  hidden.units = 16;
  hidden.activation = "relu";
  m->add(std::make_shared<Dense>("dense", hidden));
  if (dropout) m->add(std::make_shared<Dropout>("dropout", 0.25, 99));
  Dense::Options out;
  out.units = kClasses;
  out.activation = "softmax";
  m->add(std::make_shared<Dense>("dense_1", out));
  m->build({kFeatures});
  std::shared_ptr<Optimizer> opt = make_optimizer(optimizer);
  opt->set_learning_rate(learning_rate);
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")), opt, {"accuracy"},
             std::move(strategy));
  return m;
}

std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  return order;
}

std::int64_t steps_for(std::int64_t n, std::int64_t batch) { return (n + batch - 1) / batch; }

Model::EpochResult run_epoch(Model& m, const Data& d, std::int64_t batch, std::uint64_t shuffle_seed,
                             const Model::BatchCallback& cb = nullptr) {
  const auto order = permutation(d.size(), shuffle_seed);
  return m.train_epoch(d.x, d.y, order.data(), d.size(), batch, steps_for(d.size(), batch), cb);
}

double log_value(const Logs& logs, const std::string& name) {
  for (const auto& [k, v] : logs)
    if (k == name) return v;
  ADD_FAILURE() << "no '" << name << "' in the logs";
  return NAN;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::shared_ptr<Strategy> mirrored(int replicas) {
  std::vector<Device> devices;
  for (int i = 0; i < replicas; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  return std::make_shared<MirroredStrategy>(devices);
}

// A callback that checks, after every step, that every replica holds bitwise the primary's weights.
Model::BatchCallback replicas_identical(Model& m, std::atomic<int>& checked) {
  return [&m, &checked](std::int64_t batch, const Logs&) {
    TrainEngine& e = m.engine();
    const Tensor& primary = e.replica_network(0).packed_values();
    for (int r = 1; r < e.num_replicas(); ++r)
      EXPECT_TRUE(bitwise_equal(e.replica_network(r).packed_values(), primary))
          << "replica " << r << " differs from replica 0 after step " << batch;
    ++checked;
    return false;
  };
}

// One float32 step differs between strategies only in how the gradient sum is associated (one
// GEMM over the batch vs per-replica GEMMs then an all-reduce): a few float32 ulps of the
// gradient, scaled by the learning rate. The weights here are O(1), so 1e-6 absolute is
// about 8 float32 ulps at 1.0 (FLT_EPSILON = 1.19e-7).
constexpr double kOneStepTolerance = 1e-6;

double max_abs_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].shape(), b[i].shape());
    for (std::int64_t k = 0; k < a[i].numel(); ++k)
      worst = std::max(worst, std::fabs(static_cast<double>(a[i].data<float>()[k]) - b[i].data<float>()[k]));
  }
  return worst;
}

std::string temp_path(const std::string& stem) {
  static std::atomic<int> counter{0};
  const auto dir = std::filesystem::temp_directory_path();
  return (dir / ("mdtrain_model_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + stem))
      .string();
}

// ---- training ----------------------------------------------------------------------------------

TEST(ModelTraining, TrainEpochReducesLossOnSeparableProblem) {
  const Data d = blobs(120, 1);
  auto m = make_model(3, false, nullptr);
  EXPECT_TRUE(m->built());
  EXPECT_TRUE(m->compiled());
  EXPECT_EQ(m->strategy()->name(), "OneDeviceStrategy");  // the default
  std::vector<double> losses, accuracies;
  std::int64_t batches_seen = 0;
  for (std::uint64_t epoch = 0; epoch < 12; ++epoch) {
    auto r = run_epoch(*m, d, 16, epoch, [&](std::int64_t, const Logs&) {
      ++batches_seen;
      return false;
    });
    EXPECT_EQ(r.steps, steps_for(120, 16));
    EXPECT_FALSE(r.stopped);
    EXPECT_EQ(r.first_nonfinite_step, -1);
    ASSERT_EQ(r.logs.size(), 2u);
    EXPECT_EQ(r.logs[0].first, "loss");
    EXPECT_EQ(r.logs[1].first, "accuracy");
    losses.push_back(r.logs[0].second);
    accuracies.push_back(r.logs[1].second);
  }
  EXPECT_EQ(batches_seen, 12 * steps_for(120, 16));
  RecordProperty("first_epoch_loss", std::to_string(losses.front()));
  RecordProperty("last_epoch_loss", std::to_string(losses.back()));
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << "first " << losses.front() << " last " << losses.back();
  EXPECT_LT(losses.back(), 0.2);
  EXPECT_GE(accuracies.back(), 0.95);
  // Held-out data from the same blobs is separated too.
  const Data test = blobs(60, 2);
  const Logs ev = m->evaluate(test.x, test.y, 32, nullptr);
  EXPECT_GE(log_value(ev, "accuracy"), 0.95);
  const Tensor pred = m->predict(test.x, 7);
  EXPECT_EQ(pred.shape(), (Shape{60, kClasses}));
  for (std::int64_t i = 0; i < 60; ++i) {
    const float* row = pred.data<float>() + i * kClasses;
    EXPECT_NEAR(row[0] + row[1] + row[2], 1.0f, 1e-5f);  // softmax rows
  }
}

TEST(ModelTraining, CallbackCanStopAnEpoch) {
  const Data d = blobs(40, 3);
  auto m = make_model(4, false, nullptr);
  auto r = run_epoch(*m, d, 8, 0, [](std::int64_t batch, const Logs&) { return batch == 1; });
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(m->optimizer().iterations(), 2);
}

TEST(ModelTraining, SaveLoadContinueIsBitwiseTheSameAsTrainingStraightThrough) {
  const Data d = blobs(50, 4);
  const std::int64_t batch = 8;  // 50 = 6 * 8 + 2: every epoch ends on an uneven batch
  // Dropout makes the step counter part of the state that must survive the round trip.
  auto straight = make_model(11, true, nullptr);
  for (std::uint64_t e = 0; e < 4; ++e) run_epoch(*straight, d, batch, 100 + e);

  auto first_half = make_model(11, true, nullptr);
  for (std::uint64_t e = 0; e < 2; ++e) run_epoch(*first_half, d, batch, 100 + e);
  const std::string path = temp_path("resume.mdt");
  Json meta = Json::object();
  meta.set("epoch", 2);
  first_half->save(path, meta);
  Json loaded_meta;
  auto resumed = Model::load(path, nullptr, &loaded_meta);
  std::remove(path.c_str());
  EXPECT_EQ(loaded_meta.at("epoch").as_int(), 2);
  ASSERT_TRUE(resumed->compiled());
  EXPECT_EQ(resumed->optimizer().iterations(), first_half->optimizer().iterations());
  EXPECT_EQ(resumed->metric_names(), std::vector<std::string>{"accuracy"});
  const auto w_saved = first_half->get_weights(), w_loaded = resumed->get_weights();
  ASSERT_EQ(w_saved.size(), w_loaded.size());
  for (std::size_t i = 0; i < w_saved.size(); ++i) EXPECT_TRUE(bitwise_equal(w_saved[i], w_loaded[i])) << i;

  for (std::uint64_t e = 2; e < 4; ++e) run_epoch(*resumed, d, batch, 100 + e);
  const auto a = straight->get_weights(), b = resumed->get_weights();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i], b[i])) << "weight " << i;
  EXPECT_EQ(straight->optimizer().iterations(), resumed->optimizer().iterations());
}

TEST(ModelTraining, SameSeedSameWeightsDifferentSeedDifferentWeights) {
  auto a = make_model(5, true, nullptr), b = make_model(5, true, nullptr), c = make_model(6, true, nullptr);
  const auto wa = a->get_weights(), wb = b->get_weights(), wc = c->get_weights();
  for (std::size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(bitwise_equal(wa[i], wb[i]));
  EXPECT_FALSE(bitwise_equal(wa[0], wc[0]));
}

// ---- strategies ---------------------------------------------------------------------------------

class MirroredVsOneDevice : public ::testing::TestWithParam<int> {};

TEST_P(MirroredVsOneDevice, OneStepMatchesTheSingleReplicaToFloat32Rounding) {
  const int replicas = GetParam();
  const Data d = blobs(12, 5);
  const Json sgd = Json::parse(R"({"class_name": "SGD", "config": {}})");
  for (bool dropout : {false, true}) {
    SCOPED_TRACE(dropout ? "with dropout" : "without dropout");
    auto one = make_model(21, dropout, std::make_shared<OneDeviceStrategy>(), sgd, 0.5);
    auto mir = make_model(21, dropout, mirrored(replicas), sgd, 0.5);
    EXPECT_EQ(mir->engine(d.y.shape()).num_replicas(), replicas);
    const auto w0 = one->get_weights();
    auto r1 = run_epoch(*one, d, 12, 0);
    std::atomic<int> checked{0};
    auto rm = run_epoch(*mir, d, 12, 0, replicas_identical(*mir, checked));
    EXPECT_EQ(checked.load(), 1);
    EXPECT_GT(max_abs_difference(w0, one->get_weights()), 1e-3);  // the step did move the weights
    const double diff = max_abs_difference(one->get_weights(), mir->get_weights());
    RecordProperty(dropout ? "max_abs_difference_dropout" : "max_abs_difference", cat(diff));
    EXPECT_LE(diff, kOneStepTolerance);
    EXPECT_NEAR(log_value(rm.logs, "loss"), log_value(r1.logs, "loss"), 1e-6 * log_value(r1.logs, "loss"));
    EXPECT_EQ(log_value(rm.logs, "accuracy"), log_value(r1.logs, "accuracy"));
  }
}

TEST_P(MirroredVsOneDevice, ReplicasStayBitwiseIdenticalThroughUnevenAndTinyBatches) {
  const int replicas = GetParam();
  const Data d = blobs(14, 6);
  auto one = make_model(22, true, std::make_shared<OneDeviceStrategy>());
  auto mir = make_model(22, true, mirrored(replicas));
  std::atomic<int> checked{0};
  auto cb = replicas_identical(*mir, checked);
  // 14 rows in batches of 5 (the last has 4), then of 2 and of 1: fewer rows than replicas,
  // so some replicas run a step on no data at all and must still join the all-reduce.
  int expected_steps = 0;
  for (std::int64_t batch : {5, 2, 1}) {
    auto r1 = run_epoch(*one, d, batch, static_cast<std::uint64_t>(batch));
    auto rm = run_epoch(*mir, d, batch, static_cast<std::uint64_t>(batch), cb);
    expected_steps += static_cast<int>(steps_for(14, batch));
    EXPECT_EQ(rm.steps, steps_for(14, batch));
    EXPECT_TRUE(std::isfinite(log_value(rm.logs, "loss")));
    // The epoch's loss is the exact mean over the same examples, however they were split.
    EXPECT_NEAR(log_value(rm.logs, "loss"), log_value(r1.logs, "loss"), 1e-4 * log_value(r1.logs, "loss"))
        << "batch " << batch;
    EXPECT_EQ(log_value(rm.logs, "accuracy"), log_value(r1.logs, "accuracy")) << "batch " << batch;
  }
  EXPECT_EQ(checked.load(), expected_steps);
  EXPECT_EQ(mir->optimizer().iterations(), expected_steps);
  // After 24 Adam steps the rounding differences have had room to grow (measured: ~1 ulp, 6e-8).
  const double diff = max_abs_difference(one->get_weights(), mir->get_weights());
  RecordProperty("max_abs_difference", cat(diff));
  EXPECT_LE(diff, 1e-5);
  // Predictions from the replicas agree with the single-device model.
  const Tensor p1 = one->predict(d.x, 5), pm = mir->predict(d.x, 5);
  for (std::int64_t i = 0; i < p1.numel(); ++i) EXPECT_NEAR(p1.data<float>()[i], pm.data<float>()[i], 1e-4);
}

TEST_P(MirroredVsOneDevice, SameSeedSameReplicaCountIsDeterministic) {
  const int replicas = GetParam();
  const Data d = blobs(30, 7);
  auto a = make_model(23, true, mirrored(replicas)), b = make_model(23, true, mirrored(replicas));
  for (std::uint64_t e = 0; e < 2; ++e) {
    run_epoch(*a, d, 7, e);
    run_epoch(*b, d, 7, e);
  }
  const auto wa = a->get_weights(), wb = b->get_weights();
  for (std::size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(bitwise_equal(wa[i], wb[i])) << i;
}

// Layers big enough that a GEMM would be split over the intra-op threads: ThreadTeam::run must
// make each replica single-threaded before any worker starts, or the partitioning (and the float
// rounding) would vary from run to run.
TEST_P(MirroredVsOneDevice, DeterministicWithBlasSizedLayers) {
  const int replicas = GetParam();
  const std::int64_t n = 96, in = 784;
  Tensor x({n, in});
  Tensor y({n}, DType::Int32);
  std::mt19937_64 rng(40);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
  for (std::int64_t i = 0; i < n; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 10);
  auto make = [&] {
    auto m = std::make_unique<Model>("wide", 41);
    Dense::Options h;
    h.units = 128;
    h.activation = "relu";
    m->add(std::make_shared<Dense>("dense", h));
    Dense::Options o;
    o.units = 10;
    m->add(std::make_shared<Dense>("dense_1", o));
    m->build({in});
    m->compile(std::make_shared<losses::SparseCategoricalCrossentropy>(true),
               std::shared_ptr<Optimizer>(make_optimizer("adam")), {}, mirrored(replicas));
    return m;
  };
  auto a = make(), b = make();
  const Tensor pa = a->predict(x, 30), pa2 = a->predict(x, 30), pb = b->predict(x, 30);
  EXPECT_TRUE(bitwise_equal(pa, pa2)) << "the same model predicted differently twice";
  EXPECT_TRUE(bitwise_equal(pa, pb)) << "two same-seed models predicted differently";
  const auto order = permutation(n, 0);
  for (int epoch = 0; epoch < 2; ++epoch) {
    a->train_epoch(x, y, order.data(), n, 32, 3, nullptr);
    b->train_epoch(x, y, order.data(), n, 32, 3, nullptr);
  }
  const auto wa = a->get_weights(), wb = b->get_weights();
  for (std::size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(bitwise_equal(wa[i], wb[i])) << "weight " << i;
}

TEST_P(MirroredVsOneDevice, TrainOnBatchWithFewerRowsThanReplicas) {
  const int replicas = GetParam();
  const Data d = blobs(1, 8);
  auto mir = make_model(24, false, mirrored(replicas));
  auto one = make_model(24, false, nullptr);
  const Logs lm = mir->train_on_batch(d.x, d.y), l1 = one->train_on_batch(d.x, d.y);
  EXPECT_NEAR(log_value(lm, "loss"), log_value(l1, "loss"), 1e-6 * log_value(l1, "loss"));
  EXPECT_LE(max_abs_difference(one->get_weights(), mir->get_weights()), kOneStepTolerance);
  TrainEngine& e = mir->engine();
  for (int r = 1; r < replicas; ++r)
    EXPECT_TRUE(bitwise_equal(e.replica_network(r).packed_values(), e.replica_network(0).packed_values()));
  EXPECT_THROW(e.replica_network(replicas), std::out_of_range);
  EXPECT_THROW(e.replica_network(-1), std::out_of_range);
}

INSTANTIATE_TEST_SUITE_P(Replicas, MirroredVsOneDevice, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "_replicas";
                         });

// ---- errors -------------------------------------------------------------------------------------

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

// Sequential.pop under MirroredStrategy: the popped layer's weights leave with it, the rest keep
// theirs and their optimizer slots, and training goes on from there on every replica.
TEST(ModelStructure, PopKeepsTheRemainingWeightsAndOptimizerState) {
  auto m = make_model(32, false, mirrored(2));
  const Data d = blobs(24, 4);
  const auto order = permutation(24, 0);
  m->train_epoch(d.x, d.y, order.data(), 24, 8, 3, nullptr);
  const auto weights = m->get_weights();
  const auto state = m->optimizer_state();
  const auto popped = m->pop();
  EXPECT_EQ(popped->name(), "dense_1");
  EXPECT_EQ(m->stack().layers().size(), 1u);
  ASSERT_EQ(m->get_weights().size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_TRUE(bitwise_equal(m->get_weights()[i], weights[i]));
  const auto kept = m->optimizer_state();
  EXPECT_EQ(kept[0].second.data<std::int64_t>()[0], 3);
  ASSERT_EQ(kept.size(), 5u);  // iterations, then Adam's momentum and velocity of the kernel and bias
  EXPECT_EQ(kept[1].first, state[1].first);
  EXPECT_TRUE(bitwise_equal(kept[1].second, state[1].second));
  Dense::Options head;
  head.units = kClasses;
  head.activation = "softmax";
  m->add(std::make_shared<Dense>("head", head));
  m->train_epoch(d.x, d.y, order.data(), 24, 8, 3, nullptr);
  EXPECT_EQ(m->optimizer().iterations(), 6);
}

TEST(ModelStructure, PoppingAnEmptyModelIsRefused) {
  Model empty("empty", 1);
  const std::string msg = message_of([&] { empty.pop(); });
  EXPECT_EQ(msg.rfind("[sequential]", 0), 0u) << msg;
  EXPECT_THROW(empty.pop(), std::invalid_argument);
}

TEST(ModelErrors, EmptyDataIsRejected) {
  auto m = make_model(30, false, nullptr);
  Tensor x({0, kFeatures}), y({0}, DType::Int32);
  const std::int64_t none = 0;
  const std::string msg = message_of([&] { m->train_epoch(x, y, &none, 0, 8, 1, nullptr); });
  EXPECT_EQ(msg.rfind("[fit]", 0), 0u) << msg;
  EXPECT_THROW(m->train_epoch(x, y, &none, 0, 8, 1, nullptr), std::invalid_argument);
  EXPECT_THROW(m->evaluate(x, y, 8, nullptr), std::invalid_argument);
  EXPECT_THROW(m->train_on_batch(x, y), std::invalid_argument);
}

TEST(ModelErrors, NonPositiveBatchSizeIsRejected) {
  auto m = make_model(31, false, nullptr);
  const Data d = blobs(10, 9);
  const auto order = permutation(10, 0);
  for (std::int64_t bad : {0, -4}) {
    const std::string msg = message_of([&] { m->train_epoch(d.x, d.y, order.data(), 10, bad, 1, nullptr); });
    EXPECT_EQ(msg.rfind("[fit]", 0), 0u) << msg;
    EXPECT_TRUE(msg.find("batch_size") != std::string::npos) << msg;
    EXPECT_THROW(m->train_epoch(d.x, d.y, order.data(), 10, bad, 1, nullptr), std::invalid_argument);
    EXPECT_THROW(m->evaluate(d.x, d.y, bad, nullptr), std::invalid_argument);
    EXPECT_THROW(m->predict(d.x, bad), std::invalid_argument);
  }
  EXPECT_EQ(m->optimizer().iterations(), 0);  // nothing ran
}

TEST(ModelErrors, MismatchedXAndYLengthsAreRejected) {
  auto m = make_model(32, false, nullptr);
  const Data d = blobs(10, 10);
  Tensor short_y({9}, DType::Int32);
  short_y.fill(0);
  const auto order = permutation(9, 0);
  const std::string msg = message_of([&] { m->train_epoch(d.x, short_y, order.data(), 9, 4, 1, nullptr); });
  EXPECT_EQ(msg.rfind("[fit]", 0), 0u) << msg;
  EXPECT_TRUE(msg.find("(10, 4)") != std::string::npos) << msg;
  EXPECT_THROW(m->train_epoch(d.x, short_y, order.data(), 9, 4, 1, nullptr), std::invalid_argument);
  EXPECT_THROW(m->evaluate(d.x, short_y, 4, nullptr), std::invalid_argument);
  EXPECT_THROW(m->train_on_batch(d.x, short_y), std::invalid_argument);
  EXPECT_EQ(m->optimizer().iterations(), 0);
}

TEST(ModelErrors, ErrorsUnderMirroredStrategyLeaveTheModelUsable) {
  auto m = make_model(33, false, mirrored(2));
  const Data d = blobs(10, 11);
  Tensor bad_y({10}, DType::Int32);
  bad_y.fill(7);  // class id out of range for 3 classes: raised inside a replica
  const auto order = permutation(10, 0);
  EXPECT_THROW(m->train_epoch(d.x, bad_y, order.data(), 10, 4, 3, nullptr), std::invalid_argument);
  // The aborted step leaves no half-broken communicator behind: training goes on.
  std::atomic<int> checked{0};
  auto r = run_epoch(*m, d, 4, 1, replicas_identical(*m, checked));
  EXPECT_EQ(r.steps, 3);
  EXPECT_EQ(checked.load(), 3);
  EXPECT_TRUE(std::isfinite(log_value(r.logs, "loss")));
}

TEST(ModelErrors, UsingAnUncompiledModelToTrainIsALogicError) {
  Model m("plain", 0);
  Dense::Options o;
  o.units = 2;
  m.add(std::make_shared<Dense>("dense", o));
  const Data d = blobs(4, 12);
  const auto order = permutation(4, 0);
  EXPECT_THROW(m.train_epoch(d.x, d.y, order.data(), 4, 2, 2, nullptr), std::logic_error);
  // predict works without compile, as in Keras.
  EXPECT_EQ(m.predict(d.x, 3).shape(), (Shape{4, 2}));
}

}  // namespace
}  // namespace mdtrain
