// BatchNormalization across replicas.
//  - Layer level (replicas are threads on a "threads" communicator group, sliced as TrainEngine
//    slices a batch): synchronized BN on N replicas gives the outputs, input and parameter
//    gradients and moving statistics of one replica on the whole batch; per-replica BN normalizes
//    each slice on its own and averages the moving statistics weighted by rows.
//  - Model level (TrainEngine under MirroredStrategy): the same equalities after training steps,
//    uneven batches and batches with fewer rows than replicas; replicas bitwise identical
//    (moving statistics included) after every step; the optimizer never touches the moving
//    statistics; save/load, set_weights and predict keep and use them.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "mdtrain/distribute/threads/threads_communicator.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/mirrored_strategy.h"
#include "mdtrain/strategy/one_device_strategy.h"

namespace mdtrain {
namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

double at(const Tensor& t, std::int64_t i) { return static_cast<double>(t.data<float>()[i]); }

// max |a - b| / max(1, |b|) over all elements (float32 tensors).
double max_relative_difference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0;
  for (std::int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i)
    worst = std::max(worst, std::fabs(at(a, i) - at(b, i)) / std::max(1.0, std::fabs(at(b, i))));
  return worst;
}

// Float32 values that differ only in how sums were associated (per replica, then across
// replicas, versus one pass) agree to a few float32 ulps.
constexpr double kFloat32Tolerance = 1e-5;

Tensor random_tensor(const Shape& shape, std::uint64_t seed, double lo, double hi) {
  Tensor t(shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(u(rng));
  return t;
}

// Rows [first, first + rows) of replica r of N for a batch of `count`, as TrainEngine cuts it.
std::pair<std::int64_t, std::int64_t> slice_of(std::int64_t count, int n, int r) {
  const std::int64_t base = count / n, extra = count % n;
  return {r * base + std::min<std::int64_t>(r, extra), base + (r < extra ? 1 : 0)};
}

// ---- layer level ------------------------------------------------------------------------------

class CommunicatorSums : public CrossReplicaContext {
 public:
  explicit CommunicatorSums(Communicator& comm) : comm_(comm) {}
  int num_replicas() const override { return comm_.size(); }
  void sum(double* data, std::size_t count) override { comm_.all_reduce(data, count, DType::Float64); }

 private:
  Communicator& comm_;
};

struct Result {
  Tensor y, dx;                // the whole batch (replicas' slices put back in place)
  std::vector<Tensor> grads;   // trainable parameter gradients, summed over replicas
  std::vector<Tensor> moving;  // each replica's moving_mean then moving_variance
};

// One training forward and backward of clones of `proto` on n replicas (threads; n = 0: one
// layer with no CrossReplicaContext at all), each on its slice of x and dy.
Result run(const BatchNormalization& proto, const Tensor& x, const Tensor& dy, int n) {
  const std::int64_t count = x.dim(0);
  Result out{Tensor::zeros(x.shape()), Tensor::zeros(x.shape()), {}, {}};
  const int replicas = std::max(n, 1);
  std::vector<std::unique_ptr<Layer>> layers;
  for (int r = 0; r < replicas; ++r) layers.push_back(proto.clone());
  auto comms = ThreadsCommunicator::create_group(replicas);
  auto body = [&](int r) {
    auto& bn = static_cast<BatchNormalization&>(*layers[static_cast<std::size_t>(r)]);
    CommunicatorSums sums(*comms[static_cast<std::size_t>(r)]);
    ForwardContext ctx;
    ctx.training = true;
    ctx.replicas = n == 0 ? nullptr : &sums;
    const auto [first, rows] = slice_of(count, replicas, r);
    if (rows == 0) {
      for (auto* p : bn.parameters())
        if (p->trainable) p->grad.fill(0.0);
      bn.forward_without_rows(ctx);
      bn.backward_without_rows(true);
      return;
    }
    Tensor y = bn.forward(x.rows(first, first + rows), ctx);
    out.y.rows(first, first + rows).copy_from(y);
    Tensor dx = bn.backward(dy.rows(first, first + rows), true);
    out.dx.rows(first, first + rows).copy_from(dx);
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < replicas; ++r) threads.emplace_back(body, r);
  body(0);
  for (auto& t : threads) t.join();
  for (int r = 0; r < replicas; ++r) {
    auto& bn = static_cast<BatchNormalization&>(*layers[static_cast<std::size_t>(r)]);
    std::size_t k = 0;
    for (auto* p : bn.parameters()) {
      if (!p->trainable) continue;
      if (r == 0) out.grads.push_back(Tensor::zeros(p->grad.shape()));
      for (std::int64_t i = 0; i < p->grad.numel(); ++i) out.grads[k].data<float>()[i] += p->grad.data<float>()[i];
      ++k;
    }
    out.moving.push_back(bn.moving_mean().value.clone());
    out.moving.push_back(bn.moving_variance().value.clone());
  }
  return out;
}

std::unique_ptr<BatchNormalization> make_bn(bool synchronized, const Shape& input_shape) {
  BatchNormalization::Options o;
  o.synchronized = synchronized;
  o.momentum = 0.8;  // moves the moving statistics far enough to compare them meaningfully
  auto bn = std::make_unique<BatchNormalization>("bn", o);
  bn->build(input_shape, 3);
  const std::int64_t c = input_shape.back();
  bn->gamma().value.copy_from(random_tensor({c}, 5, 0.5, 2.0));
  bn->beta().value.copy_from(random_tensor({c}, 6, -0.5, 0.5));
  bn->moving_mean().value.copy_from(random_tensor({c}, 7, 1.0, 3.0));  // the sums' shift: not 0
  return bn;
}

struct SyncCase {
  int replicas;
  std::int64_t batch;
  Shape input_shape;
};

void PrintTo(const SyncCase& c, std::ostream* os) {
  *os << c.replicas << " replicas, batch " << c.batch << ", input " << to_string(c.input_shape);
}

class SyncBatchNormLayer : public ::testing::TestWithParam<SyncCase> {};

TEST_P(SyncBatchNormLayer, NReplicasEqualOneReplicaOnTheWholeBatch) {
  const SyncCase c = GetParam();
  auto bn = make_bn(true, c.input_shape);
  Shape xs{c.batch};
  xs.insert(xs.end(), c.input_shape.begin(), c.input_shape.end());
  const Tensor x = random_tensor(xs, 11, 1.0, 7.0), dy = random_tensor(xs, 12, -1.0, 1.0);
  const Result one = run(*bn, x, dy, 0), many = run(*bn, x, dy, c.replicas);
  EXPECT_LE(max_relative_difference(many.y, one.y), kFloat32Tolerance);
  EXPECT_LE(max_relative_difference(many.dx, one.dx), kFloat32Tolerance);
  ASSERT_EQ(many.grads.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k)
    EXPECT_LE(max_relative_difference(many.grads[k], one.grads[k]), kFloat32Tolerance);
  for (int r = 0; r < c.replicas; ++r)
    for (std::size_t k = 0; k < 2; ++k) {
      const Tensor& mine = many.moving[static_cast<std::size_t>(2 * r) + k];
      EXPECT_TRUE(bitwise_equal(mine, many.moving[k])) << "replica " << r;
      EXPECT_LE(max_relative_difference(mine, one.moving[k]), kFloat32Tolerance);
    }
  EXPECT_GT(std::fabs(at(one.moving[1], 0) - 1.0), 1e-3);  // the step did move them
}

INSTANTIATE_TEST_SUITE_P(Cases, SyncBatchNormLayer,
                         ::testing::Values(SyncCase{2, 10, {3}}, SyncCase{4, 10, {3}},  // 4: 3,3,2,2
                                           SyncCase{2, 7, {2, 2, 3}}, SyncCase{4, 7, {2, 2, 3}},
                                           SyncCase{4, 3, {2, 2, 3}}),  // 1,1,1,0
                         [](const ::testing::TestParamInfo<SyncCase>& info) {
                           return std::to_string(info.param.replicas) + "_replicas_batch_" +
                                  std::to_string(info.param.batch) + "_rank" +
                                  std::to_string(info.param.input_shape.size() + 1);
                         });

TEST(PerReplicaBatchNormLayer, SlicesNormalizeAloneAndMovingStatisticsAverageByRows) {
  // 7 rows over 3 replicas: 3, 2, 2.
  const int n = 3;
  auto bn = make_bn(false, {2});
  const Tensor x = random_tensor({7, 2}, 21, -1.0, 5.0), dy = random_tensor({7, 2}, 22, -1.0, 1.0);
  const Result many = run(*bn, x, dy, n);
  std::vector<double> weighted_mean(2, 0.0), weighted_var(2, 0.0);
  for (int r = 0; r < n; ++r) {
    const auto [first, rows] = slice_of(7, n, r);
    // Each slice is exactly what one layer does with that slice alone.
    const Result alone = run(*bn, x.rows(first, first + rows), dy.rows(first, first + rows), 0);
    EXPECT_TRUE(bitwise_equal(many.y.rows(first, first + rows), alone.y)) << "replica " << r;
    EXPECT_TRUE(bitwise_equal(many.dx.rows(first, first + rows), alone.dx)) << "replica " << r;
    for (int c = 0; c < 2; ++c) {
      double mean = 0, var = 0;
      for (std::int64_t i = first; i < first + rows; ++i) mean += at(x, i * 2 + c);
      mean /= static_cast<double>(rows);
      for (std::int64_t i = first; i < first + rows; ++i) var += (at(x, i * 2 + c) - mean) * (at(x, i * 2 + c) - mean);
      var /= static_cast<double>(rows);
      weighted_mean[static_cast<std::size_t>(c)] += static_cast<double>(rows) * mean / 7.0;
      weighted_var[static_cast<std::size_t>(c)] += static_cast<double>(rows) * var / 7.0;
    }
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(bitwise_equal(many.moving[static_cast<std::size_t>(2 * r)], many.moving[0])) << r;
    EXPECT_TRUE(bitwise_equal(many.moving[static_cast<std::size_t>(2 * r + 1)], many.moving[1])) << r;
  }
  for (int c = 0; c < 2; ++c) {
    const auto k = static_cast<std::size_t>(c);
    EXPECT_NEAR(at(many.moving[0], c), 0.8 * at(bn->moving_mean().value, c) + 0.2 * weighted_mean[k], 1e-5);
    EXPECT_NEAR(at(many.moving[1], c), 0.8 * 1.0 + 0.2 * weighted_var[k], 1e-5);
  }
}

TEST(PerReplicaBatchNormLayer, ReplicasWithoutRowsCountForNothing) {
  // 2 rows over 4 replicas: 1, 1, 0, 0. Slices of one row have variance 0.
  auto bn = make_bn(false, {3});
  const Tensor x = random_tensor({2, 3}, 31, -1.0, 1.0), dy = random_tensor({2, 3}, 32, -1.0, 1.0);
  const Result many = run(*bn, x, dy, 4);
  for (int c = 0; c < 3; ++c) {
    const double mean = (at(x, c) + at(x, 3 + c)) / 2;
    EXPECT_NEAR(at(many.moving[0], c), 0.8 * at(bn->moving_mean().value, c) + 0.2 * mean, 1e-6);
    EXPECT_NEAR(at(many.moving[1], c), 0.8, 1e-6);
  }
  for (std::size_t r = 1; r < 4; ++r) {
    EXPECT_TRUE(bitwise_equal(many.moving[2 * r], many.moving[0])) << r;
    EXPECT_TRUE(bitwise_equal(many.moving[2 * r + 1], many.moving[1])) << r;
  }
}

// ---- model level ------------------------------------------------------------------------------

std::shared_ptr<Strategy> mirrored(int replicas) {
  std::vector<Device> devices;
  for (int i = 0; i < replicas; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  return std::make_shared<MirroredStrategy>(devices);
}

struct Data {
  Tensor x, y;
};

// (n, 3, 4) inputs with per-feature offsets, labels in 0..2.
Data make_data(std::int64_t n, std::uint64_t seed) {
  Data d{random_tensor({n, 3, 4}, seed, -1.0, 1.0), Tensor({n}, DType::Int32)};
  for (std::int64_t i = 0; i < d.x.numel(); ++i) d.x.data<float>()[i] += static_cast<float>(i % 4);
  for (std::int64_t i = 0; i < n; ++i) d.y.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7) % 3);
  return d;
}

// Dense(6) on (3, 4) inputs -> BatchNormalization (rank 3: over batch and positions) -> relu ->
// Flatten -> Dense(3, softmax); sparse categorical crossentropy.
std::unique_ptr<Model> make_model(bool synchronized, std::shared_ptr<Strategy> strategy,
                                  const Json& optimizer = Json::parse(R"({"class_name": "SGD", "config": {}})"),
                                  double lr = 0.1, std::uint64_t seed = 31) {
  auto m = std::make_unique<Model>("bn_model", seed);
  Dense::Options hidden;
  hidden.units = 6;
  m->add(std::make_shared<Dense>("dense", hidden));
  BatchNormalization::Options o;
  o.synchronized = synchronized;
  o.momentum = 0.9;
  m->add(std::make_shared<BatchNormalization>("bn", o));
  m->add(std::make_shared<ActivationLayer>("relu", "relu"));
  m->add(std::make_shared<Flatten>("flatten"));
  Dense::Options out;
  out.units = 3;
  out.activation = "softmax";
  m->add(std::make_shared<Dense>("dense_1", out));
  m->build({3, 4});
  std::shared_ptr<Optimizer> opt = make_optimizer(optimizer);
  opt->set_learning_rate(lr);
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")), opt, {}, std::move(strategy));
  return m;
}

double max_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, max_relative_difference(a[i], b[i]));
  return worst;
}

// After every step: each replica's trainable and non-trainable buffers equal replica 0's, bit for bit.
Model::BatchCallback replicas_identical(Model& m, std::atomic<int>& checked) {
  return [&m, &checked](std::int64_t batch, const Logs&) {
    TrainEngine& e = m.engine();
    for (int r = 1; r < e.num_replicas(); ++r) {
      EXPECT_TRUE(bitwise_equal(e.replica_network(r).packed_values(), e.replica_network(0).packed_values()))
          << "replica " << r << " weights differ after step " << batch;
      EXPECT_TRUE(
          bitwise_equal(e.replica_network(r).non_trainable_values(), e.replica_network(0).non_trainable_values()))
          << "replica " << r << " moving statistics differ after step " << batch;
    }
    ++checked;
    return false;
  };
}

Model::EpochResult run_epoch(Model& m, const Data& d, std::int64_t batch, const Model::BatchCallback& cb = nullptr) {
  const std::int64_t n = d.x.dim(0);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  return m.train_epoch(d.x, d.y, order.data(), n, batch, (n + batch - 1) / batch, cb);
}

class SyncBatchNormModel : public ::testing::TestWithParam<int> {};

TEST_P(SyncBatchNormModel, StepsEqualOneReplicaOnTheWholeBatch) {
  const int replicas = GetParam();
  // 10 rows: uneven over 4 replicas (3, 3, 2, 2); 3 rows: fewer than 4 replicas.
  for (std::int64_t rows : {10, 3}) {
    SCOPED_TRACE("batch of " + std::to_string(rows));
    const Data d = make_data(rows, 40 + static_cast<std::uint64_t>(rows));
    auto one = make_model(true, std::make_shared<OneDeviceStrategy>());
    auto mir = make_model(true, mirrored(replicas));
    const auto w0 = one->get_weights();
    const Logs l1 = one->train_on_batch(d.x, d.y), lm = mir->train_on_batch(d.x, d.y);
    EXPECT_NEAR(lm.front().second, l1.front().second, 1e-6 * l1.front().second);  // the training outputs' loss
    EXPECT_GT(max_difference(one->get_weights(), w0), 1e-3);
    // Every weight, the moving statistics (get_weights items 4 and 5) included.
    EXPECT_LE(max_difference(mir->get_weights(), one->get_weights()), kFloat32Tolerance);
    EXPECT_GT(std::fabs(at(one->get_weights()[5], 0) - 1.0), 1e-4);  // moving_variance moved
    EXPECT_LE(max_relative_difference(mir->predict(d.x, 4), one->predict(d.x, 4)), kFloat32Tolerance);
  }
  // Several steps with an uneven last batch (14 = 4 + 4 + 4 + 2).
  const Data d = make_data(14, 50);
  auto one = make_model(true, std::make_shared<OneDeviceStrategy>());
  auto mir = make_model(true, mirrored(replicas));
  std::atomic<int> checked{0};
  run_epoch(*one, d, 4);
  run_epoch(*mir, d, 4, replicas_identical(*mir, checked));
  EXPECT_EQ(checked.load(), 4);
  EXPECT_LE(max_difference(mir->get_weights(), one->get_weights()), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Replicas, SyncBatchNormModel, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "_replicas";
                         });

class BatchNormReplicas : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(BatchNormReplicas, StayBitwiseIdenticalThroughUnevenAndTinyBatches) {
  const auto [replicas, synchronized] = GetParam();
  const Data d = make_data(14, 60);
  auto mir = make_model(synchronized, mirrored(replicas), "adam", 0.01);
  const Tensor moving_before = mir->stack().non_trainable_values().clone();
  std::atomic<int> checked{0};
  auto cb = replicas_identical(*mir, checked);
  int expected = 0;
  // 14 rows in batches of 5 (the last has 4), of 2 and of 1: fewer rows than replicas.
  for (std::int64_t batch : {5, 2, 1}) {
    auto r = run_epoch(*mir, d, batch, cb);
    EXPECT_TRUE(std::isfinite(r.logs.front().second));
    expected += static_cast<int>((14 + batch - 1) / batch);
  }
  EXPECT_EQ(checked.load(), expected);
  EXPECT_FALSE(bitwise_equal(mir->stack().non_trainable_values(), moving_before));
  // Prediction and evaluation use the moving statistics and run no collective, even with
  // replicas that get no rows.
  auto one = make_model(synchronized, std::make_shared<OneDeviceStrategy>());
  one->set_weights(mir->get_weights());
  EXPECT_LE(max_relative_difference(mir->predict(d.x.rows(0, 3), 2), one->predict(d.x.rows(0, 3), 2)), 1e-6);
  const Logs le = mir->evaluate(d.x.rows(0, 3), d.y.rows(0, 3), 3, nullptr);
  const Logs l1 = one->evaluate(d.x.rows(0, 3), d.y.rows(0, 3), 3, nullptr);
  EXPECT_NEAR(le.front().second, l1.front().second, 1e-6 * l1.front().second);
}

INSTANTIATE_TEST_SUITE_P(Cases, BatchNormReplicas, ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "_replicas" +
                                  (std::get<1>(info.param) ? "_synchronized" : "_per_replica");
                         });

TEST(BatchNormTraining, OptimizerNeverTouchesTheMovingStatistics) {
  // AdamW decays every weight it updates: had it updated the moving statistics, they would
  // differ from Keras's moving-average formula below. BatchNormalization comes first, so the
  // expected moving statistics follow from the data alone.
  for (int replicas : {1, 2}) {
    SCOPED_TRACE(std::to_string(replicas) + " replicas");
    auto m = std::make_unique<Model>("bn_first", 3);
    BatchNormalization::Options o;
    o.synchronized = true;  // the global batch's statistics, whatever the replica count
    o.momentum = 0.5;
    m->add(std::make_shared<BatchNormalization>("bn", o));
    m->add(std::make_shared<Flatten>("flatten"));
    Dense::Options out;
    out.units = 3;
    m->add(std::make_shared<Dense>("dense", out));
    m->build({3, 4});
    auto opt = make_optimizer(Json::parse(R"({"class_name": "AdamW", "config": {"weight_decay": 0.5}})"));
    opt->set_learning_rate(0.5);
    std::shared_ptr<Strategy> strategy = replicas == 1 ? std::make_shared<OneDeviceStrategy>() : mirrored(2);
    m->compile(std::make_shared<losses::SparseCategoricalCrossentropy>(true),
               std::shared_ptr<Optimizer>(std::move(opt)), {}, strategy);
    const Data d = make_data(6, 70);
    m->train_on_batch(d.x, d.y);
    const auto w = m->get_weights();  // gamma, beta, moving_mean, moving_variance, kernel, bias
    for (int c = 0; c < 4; ++c) {
      double mean = 0, var = 0;
      for (std::int64_t i = 0; i < 18; ++i) mean += at(d.x, i * 4 + c) / 18.0;
      for (std::int64_t i = 0; i < 18; ++i) var += (at(d.x, i * 4 + c) - mean) * (at(d.x, i * 4 + c) - mean) / 18.0;
      EXPECT_NEAR(at(w[2], c), 0.5 * mean, 1e-6) << c;
      EXPECT_NEAR(at(w[3], c), 0.5 + 0.5 * var, 1e-6) << c;
    }
    EXPECT_NE(at(w[0], 0), 1.0);  // gamma did train (and decay)
    for (const auto& [name, t] : m->optimizer_state()) EXPECT_EQ(name.find("moving"), std::string::npos) << name;
    EXPECT_EQ(m->optimizer().total_size(), m->stack().trainable_count());
    EXPECT_EQ(m->stack().trainable_count(), 4 + 4 + 12 * 3 + 3);
    EXPECT_EQ(m->stack().parameter_count(), 4 + 4 + 4 + 4 + 12 * 3 + 3);
  }
}

std::string temp_path(const std::string& stem) {
  static std::atomic<int> counter{0};
  return (std::filesystem::temp_directory_path() /
          ("mdtrain_sync_bn_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + stem))
      .string();
}

TEST(BatchNormTraining, SaveLoadKeepsTheMovingStatisticsAndResumesBitForBit) {
  const Data d = make_data(14, 80);
  auto straight = make_model(false, mirrored(2), "adam", 0.01);
  for (int e = 0; e < 2; ++e) run_epoch(*straight, d, 4);
  auto first = make_model(false, mirrored(2), "adam", 0.01);
  run_epoch(*first, d, 4);
  const std::string path = temp_path("bn.mdt");
  first->save(path);
  auto loaded = Model::load(path, mirrored(2));
  std::remove(path.c_str());
  const auto a = first->get_weights(), b = loaded->get_weights();
  ASSERT_EQ(a.size(), 8u);  // kernel, bias, gamma, beta, moving_mean, moving_variance, kernel, bias
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i], b[i])) << "weight " << i;
  EXPECT_NE(at(b[5], 0), 1.0);
  EXPECT_EQ(loaded->stack().parameters()[5]->name, "bn/moving_variance");
  EXPECT_FALSE(loaded->stack().parameters()[5]->trainable);
  EXPECT_TRUE(bitwise_equal(loaded->predict(d.x, 5), first->predict(d.x, 5)));
  std::atomic<int> checked{0};
  run_epoch(*loaded, d, 4, replicas_identical(*loaded, checked));
  EXPECT_EQ(checked.load(), 4);
  const auto s = straight->get_weights(), r = loaded->get_weights();
  for (std::size_t i = 0; i < s.size(); ++i) EXPECT_TRUE(bitwise_equal(s[i], r[i])) << "weight " << i;
}

TEST(BatchNormTraining, SetWeightsReachesEveryReplicasMovingStatistics) {
  auto m = make_model(false, mirrored(3));
  const Data d = make_data(5, 90);
  m->train_on_batch(d.x, d.y);  // creates the replicas
  auto w = m->get_weights();
  w[5].fill(2.5);  // moving_variance
  m->set_weights(w);
  for (int r = 0; r < 3; ++r) {
    const Tensor& nt = m->engine().replica_network(r).non_trainable_values();
    EXPECT_EQ(at(nt, 6), 2.5) << "replica " << r;  // moving_mean (6 values), then moving_variance
  }
}

}  // namespace
}  // namespace mdtrain
