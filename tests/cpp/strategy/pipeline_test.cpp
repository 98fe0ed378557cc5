// PipelineStrategy (pipeline stages on logical CPU devices, and pipelines x data parallelism):
// weights after several SGD / Adam steps equal the one-device model within float32 rounding (the
// micro-batches' gradients are summed in another order), for GPipe and 1F1B, 2 and 4 stages,
// uneven micro-batches; the two schedules are bitwise equal; keeping each in-flight micro-batch's
// activations (state slots) and recomputing them give bitwise equal weights; 1F1B stashes and holds
// no more than GPipe; errors before training for fewer micro-batches than stages and unsupported
// layers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/core/errors.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/optim/sgd.h"
#include "mdtrain/strategy/pipeline_executor.h"
#include "mdtrain/strategy/pipeline_strategy.h"
#include "mdtrain/strategy/stage_timer.h"

namespace mdtrain {
namespace {

constexpr double kTolerance = 1e-5;
// Batches of 11 (the last of 8): micro-batches of uneven sizes.
constexpr std::int64_t kRows = 30, kBatch = 11;

std::vector<Device> cpus(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  return devices;
}

Tensor features(Shape shape, std::uint64_t seed) {
  Tensor t(shape, DType::Float32);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = noise(rng);
  return t;
}

Tensor classes(std::int64_t rows, int k) {
  Tensor y({rows}, DType::Int32);
  for (std::int64_t i = 0; i < rows; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7) % k);
  return y;
}

Dense::Options dense(std::int64_t units, const std::string& activation) {
  Dense::Options o;
  o.units = units;
  o.activation = activation;
  o.kernel_regularizer = Json::parse(R"({"class_name": "L2", "config": {"l2": 0.01}})");
  return o;
}

const Tensor& data_x() {
  static const Tensor x = features({kRows, 6}, 1);
  return x;
}
const Tensor& data_y() {
  static const Tensor y = classes(kRows, 4);
  return y;
}

// Five Dense layers and a Dropout (masks keyed by global row, so they do not depend on the cut).
std::unique_ptr<Model> make_model(std::shared_ptr<Strategy> strategy, const std::string& optimizer,
                                  bool dropout = true) {
  auto m = std::make_unique<Model>("m", 5);
  m->add(std::make_shared<Dense>("dense", dense(16, "relu")));
  if (dropout) m->add(std::make_shared<Dropout>("dropout", 0.3, 11));
  m->add(std::make_shared<Dense>("dense_1", dense(12, "tanh")));
  m->add(std::make_shared<Dense>("dense_2", dense(10, "relu")));
  m->add(std::make_shared<Dense>("dense_3", dense(8, "relu")));
  m->add(std::make_shared<Dense>("dense_4", dense(4, "softmax")));
  m->build({6});
  std::shared_ptr<Optimizer> opt =
      optimizer == "sgd" ? std::shared_ptr<Optimizer>(std::make_shared<SGD>(0.05, 0.9)) : make_optimizer("adam");
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")), opt, {"accuracy"},
             std::move(strategy));
  return m;
}

std::shared_ptr<PipelineStrategy> pipeline(int stages, int microbatches, PipelineScheduleKind kind, int pipelines = 1,
                                           std::vector<int> starts = {}, bool recompute = false) {
  if (pipelines == 1)
    return std::make_shared<PipelineStrategy>(DeviceMesh({stages}, {"pipe"}, cpus(stages)), microbatches, kind,
                                              std::move(starts), "pipe", std::nullopt, false, nullptr, recompute);
  return std::make_shared<PipelineStrategy>(DeviceMesh({pipelines, stages}, {"batch", "pipe"},
                                                       cpus(pipelines * stages)),
                                            microbatches, kind, std::move(starts), "pipe", std::string("batch"), false,
                                            nullptr, recompute);
}

void train(Model& m, int epochs) {
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  for (int e = 0; e < epochs; ++e)
    m.train_epoch(data_x(), data_y(), order.data(), kRows, kBatch, (kRows + kBatch - 1) / kBatch, nullptr);
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

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// (stages, micro-batches, pipelines, optimizer)
class PipelineMatchesOneDevice : public ::testing::TestWithParam<std::tuple<int, int, int, std::string>> {};

TEST_P(PipelineMatchesOneDevice, WeightsAfterTrainingAndSchedulesBitwiseEqual) {
  const auto [stages, microbatches, pipelines, optimizer] = GetParam();
  auto reference = make_model(nullptr, optimizer);
  auto gpipe = make_model(pipeline(stages, microbatches, PipelineScheduleKind::GPipe, pipelines), optimizer);
  auto one_f_one_b = make_model(pipeline(stages, microbatches, PipelineScheduleKind::OneFOneB, pipelines), optimizer);
  train(*reference, 3);
  train(*gpipe, 3);
  train(*one_f_one_b, 3);
  const auto want = reference->get_weights(), got = gpipe->get_weights(), other = one_f_one_b->get_weights();
  ASSERT_EQ(want.size(), got.size());
  ASSERT_EQ(want.size(), other.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("weight " + std::to_string(i));
    EXPECT_LE(worst_gap(got[i], want[i]), kTolerance);
    EXPECT_TRUE(bitwise_equal(got[i], other[i])) << "GPipe and 1F1B differ";
  }
  // The optimizer state is whole, in the one-device order.
  const auto want_state = reference->optimizer_state(), got_state = gpipe->optimizer_state();
  ASSERT_EQ(want_state.size(), got_state.size());
  for (std::size_t i = 1; i < want_state.size(); ++i) {
    EXPECT_EQ(want_state[i].first, got_state[i].first);
    EXPECT_LE(worst_gap(got_state[i].second, want_state[i].second), kTolerance) << want_state[i].first;
  }
  EXPECT_LE(worst_gap(gpipe->predict(data_x(), kBatch), reference->predict(data_x(), kBatch)), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Pipelines, PipelineMatchesOneDevice,
                         ::testing::Values(std::make_tuple(2, 2, 1, std::string("sgd")),
                                           std::make_tuple(2, 3, 1, std::string("adam")),
                                           std::make_tuple(4, 4, 1, std::string("sgd")),
                                           std::make_tuple(4, 5, 1, std::string("adam")),
                                           std::make_tuple(2, 4, 2, std::string("sgd"))));

TEST(Pipeline, ExplicitStageStartsAndBalancedCut) {
  // (The cut itself: stage_balance_test.cpp.) Measured times: one positive entry per layer, and
  // a cut the executor accepts.
  auto timed = std::make_shared<PipelineStrategy>(DeviceMesh({2}, {"pipe"}, cpus(2)), 2, PipelineScheduleKind::GPipe,
                                                  std::vector<int>{}, "pipe", std::nullopt, true);
  auto timed_model = make_model(timed, "sgd");
  train(*timed_model, 1);
  const auto& cut = timed->executor()->stage_starts();
  ASSERT_EQ(cut.size(), 3u);
  EXPECT_GT(cut[1], 0);
  EXPECT_LT(cut[1], 6);
  auto strategy = pipeline(2, 2, PipelineScheduleKind::OneFOneB, 1, {4});
  auto reference = make_model(nullptr, "sgd");
  auto m = make_model(strategy, "sgd");
  train(*reference, 2);
  train(*m, 2);
  ASSERT_NE(strategy->executor(), nullptr);  // made at the first step
  EXPECT_EQ(strategy->executor()->stage_starts(), (std::vector<int>{0, 4, 6}));
  const auto want = reference->get_weights(), got = m->get_weights();
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_LE(worst_gap(got[i], want[i]), kTolerance);
}

TEST(Pipeline, LayerTimerHoldsMicroBatchesInFlightWithoutTouchingTheModel) {
  auto m = make_model(nullptr, "sgd");
  const auto before = m->get_weights();
  for (int held : {1, 3}) {
    const auto t = measure_layer_times(m->stack(), 4, 2, held);
    ASSERT_EQ(t.size(), m->stack().layers().size());
    for (auto ns : t) EXPECT_GE(ns, 1);
  }
  const auto after = m->get_weights();
  for (std::size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(bitwise_equal(before[i], after[i]));
  EXPECT_THROW(measure_layer_times(m->stack(), 4, 2, 0), std::invalid_argument);
  EXPECT_THROW(measure_layer_times(m->stack(), 0, 2, 1), std::invalid_argument);
}

TEST(Pipeline, OneFOneBStashesNoMoreThanGPipe) {
  auto g = pipeline(2, 8, PipelineScheduleKind::GPipe);
  auto o = pipeline(2, 8, PipelineScheduleKind::OneFOneB);
  auto a = make_model(g, "sgd");
  auto b = make_model(o, "sgd");
  train(*a, 1);
  train(*b, 1);
  const auto pg = g->executor()->peak_stash_bytes(), po = o->executor()->peak_stash_bytes();
  ASSERT_EQ(pg.size(), 2u);
  for (std::size_t s = 0; s < pg.size(); ++s) {
    EXPECT_GT(po[s], 0);
    EXPECT_LT(po[s], pg[s]) << "stage " << s;  // m = 8 >= 2p: 1F1B holds at most p - s micro-batches
  }
  // The activations kept for backward: one state slot per micro-batch in flight (GPipe all 8, 1F1B
  // p - s), each holding its layers' state, on top of the stashed inputs.
  EXPECT_EQ(g->executor()->state_slots(), (std::vector<int>{8, 8}));
  EXPECT_EQ(o->executor()->state_slots(), (std::vector<int>{2, 1}));
  const auto ag = g->executor()->peak_activation_bytes(), ao = o->executor()->peak_activation_bytes();
  ASSERT_EQ(ag.size(), 2u);
  for (std::size_t s = 0; s < ag.size(); ++s) {
    EXPECT_GT(ao[s], po[s]) << "stage " << s;  // the layers' state counts beyond the inputs
    EXPECT_LT(ao[s], ag[s]) << "stage " << s;
  }
  // Recomputation holds one set of layer states: less than keeping 1F1B's p - s of them.
  auto r = pipeline(2, 8, PipelineScheduleKind::OneFOneB, 1, {}, true);
  auto c = make_model(r, "sgd");
  train(*c, 1);
  EXPECT_EQ(r->executor()->state_slots(), (std::vector<int>{0, 0}));
  EXPECT_EQ(r->executor()->peak_stash_bytes(), po);
  const auto ar = r->executor()->peak_activation_bytes();
  EXPECT_LT(ar[0], ao[0]);
  EXPECT_LE(ar[1], ao[1]);  // stage 1 of 1F1B keeps one micro-batch in flight: one set either way
  const auto busy = g->executor()->busy_seconds(), idle = g->executor()->idle_seconds();
  ASSERT_EQ(busy.size(), 2u);
  EXPECT_GT(busy[0], 0.0);
  EXPECT_GE(idle[1], 0.0);
}

TEST(Pipeline, InOneProcessTheStagesAreAlwaysWholeAndGatheringIsANoOp) {
  // Lazy gathering concerns stages on other workers only: in one process the primary gathers from
  // the stages' devices on any read, so gather_stages moves nothing and the batch logs need no sum.
  auto strategy = pipeline(2, 2, PipelineScheduleKind::OneFOneB, 1, {3});
  EXPECT_FALSE(strategy->metrics_split_across_workers());
  strategy->gather_stages();  // no executor yet: nothing to gather
  auto m = make_model(strategy, "adam");
  train(*m, 1);
  ASSERT_NE(strategy->executor(), nullptr);
  EXPECT_TRUE(strategy->executor()->stages_whole());
  strategy->gather_stages();
  EXPECT_EQ(strategy->executor()->gathers(), 0);
  auto reference = make_model(nullptr, "adam");
  train(*reference, 1);
  const auto want = reference->get_weights(), got = m->get_weights();
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_LE(worst_gap(got[i], want[i]), kTolerance);
}

TEST(Pipeline, FewerMicroBatchesThanStagesFailsBeforeTraining) {
  try {
    pipeline(4, 3, PipelineScheduleKind::OneFOneB);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("num_microbatches (3) must be >= the number of stages (4)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(pipeline(2, 2, PipelineScheduleKind::GPipe, 1, {0}), std::invalid_argument);
  // A stage past the last layer: refused at the first step, before any weight changes.
  auto m = make_model(pipeline(2, 2, PipelineScheduleKind::GPipe, 1, {9}), "sgd");
  const auto before = m->get_weights();
  EXPECT_THROW(train(*m, 1), std::invalid_argument);
  EXPECT_TRUE(bitwise_equal(m->get_weights()[0], before[0]));
}

std::unique_ptr<Model> batch_norm_model(std::shared_ptr<Strategy> strategy) {
  auto m = std::make_unique<Model>("m", 5);
  m->add(std::make_shared<Dense>("dense", dense(8, "relu")));
  BatchNormalization::Options o;
  o.momentum = 0.5;  // a large step, so that a wrong update shows
  m->add(std::make_shared<BatchNormalization>("bn", o));
  m->add(std::make_shared<Dense>("dense_1", dense(4, "softmax")));
  m->build({6});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")), std::make_shared<SGD>(0.05), {},
             std::move(strategy));
  return m;
}

// The planner's stage timer (stage_timer.h) runs a stage's op list on its own copy of the stage's
// layers: every schedule's lists run (GPipe's all-forwards-first on m slots, 1F1B's interleaving),
// each timed pass reports its forwards and backwards, the model's weights and BatchNormalization's
// moving statistics are untouched, and bad input is an invalid_argument.
TEST(Pipeline, StageTimerRunsEachStagesOpListWithoutTouchingTheModel) {
  for (bool with_bn : {false, true}) {
    auto m = with_bn ? batch_norm_model(nullptr) : make_model(nullptr, "sgd");
    const auto before = m->get_weights();
    const std::size_t n = m->stack().layers().size(), cut = 2;
    for (auto kind : {PipelineScheduleKind::GPipe, PipelineScheduleKind::OneFOneB}) {
      const PipelineSchedule schedule = make_pipeline_schedule(kind, 2, 4);
      for (int s = 0; s < 2; ++s) {
        const auto passes = measure_stage_time(m->stack(), s == 0 ? 0 : cut, s == 0 ? cut : n, 3,
                                               schedule.ops[static_cast<std::size_t>(s)], 3);
        ASSERT_EQ(passes.size(), 3u);
        for (const StageTime& t : passes) {
          EXPECT_GT(t.forward_ns, 0);
          EXPECT_GT(t.backward_ns, 0);
        }
      }
    }
    const auto after = m->get_weights();
    ASSERT_EQ(before.size(), after.size());
    for (std::size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(bitwise_equal(before[i], after[i])) << i;
  }
  auto m = make_model(nullptr, "sgd");
  const auto ops = make_pipeline_schedule(PipelineScheduleKind::GPipe, 2, 2).ops[0];
  const std::size_t n = m->stack().layers().size();
  EXPECT_THROW(measure_stage_time(m->stack(), 2, 2, 3, ops), std::invalid_argument);      // no layers
  EXPECT_THROW(measure_stage_time(m->stack(), 0, n + 1, 3, ops), std::invalid_argument);  // past the last
  EXPECT_THROW(measure_stage_time(m->stack(), 0, 2, 0, ops), std::invalid_argument);      // no rows
  EXPECT_THROW(measure_stage_time(m->stack(), 0, 2, 3, ops, 0), std::invalid_argument);   // no pass
  const std::vector<PipelineOp> backward_first{{PipelineOpKind::Backward, 0}, {PipelineOpKind::Forward, 0}};
  EXPECT_THROW(measure_stage_time(m->stack(), 0, 2, 3, backward_first), std::invalid_argument);
}

// One global batch of all 30 rows: the moving statistics move once, from the whole batch's mean
// and variance, whatever the micro-batch count or schedule (the one-device model's, up to rounding).
TEST(Pipeline, BatchNormalizationMovingStatisticsDoNotDependOnTheMicroBatchCount) {
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  auto one_step = [&](std::shared_ptr<Strategy> strategy) {
    auto m = batch_norm_model(std::move(strategy));
    m->train_epoch(data_x(), data_y(), order.data(), kRows, kRows, 1, nullptr);
    return m->get_weights();
  };
  const auto want = one_step(nullptr);
  const auto two = one_step(pipeline(2, 2, PipelineScheduleKind::GPipe, 1, {1}));
  const auto eight = one_step(pipeline(2, 8, PipelineScheduleKind::GPipe, 1, {1}));
  const auto eight_1f1b = one_step(pipeline(2, 8, PipelineScheduleKind::OneFOneB, 1, {1}));
  const auto grid = one_step(pipeline(2, 4, PipelineScheduleKind::OneFOneB, 2, {1}));
  for (std::size_t i : {4, 5}) {  // bn/moving_mean, bn/moving_variance
    SCOPED_TRACE("weight " + std::to_string(i));
    EXPECT_FALSE(bitwise_equal(want[i], batch_norm_model(nullptr)->get_weights()[i])) << "did not move";
    EXPECT_LE(worst_gap(two[i], want[i]), 1e-6);
    EXPECT_LE(worst_gap(eight[i], want[i]), 1e-6);
    EXPECT_LE(worst_gap(eight[i], two[i]), 1e-6);
    EXPECT_LE(worst_gap(grid[i], want[i]), 1e-6);
    EXPECT_TRUE(bitwise_equal(eight[i], eight_1f1b[i])) << "recomputation recorded a micro-batch twice";
  }
}

// Keeping each in-flight micro-batch's activations in its own state slot and recomputing them
// from the stashed input run every micro-batch's forward and backward on the same values, sum the
// gradients in the same order and record BatchNormalization's statistics once each: bitwise the
// same weights (Dropout masks, BatchNormalization's moving statistics, Adam's slots included).
TEST(Pipeline, KeptActivationsAndRecomputationGiveBitwiseEqualWeights) {
  struct Case {
    int stages, microbatches, pipelines;
    PipelineScheduleKind kind;
  };
  const std::vector<Case> cases = {{2, 3, 1, PipelineScheduleKind::GPipe},    {2, 3, 1, PipelineScheduleKind::OneFOneB},
                                   {4, 5, 1, PipelineScheduleKind::GPipe},    {4, 5, 1, PipelineScheduleKind::OneFOneB},
                                   {2, 4, 2, PipelineScheduleKind::OneFOneB}, {2, 4, 2, PipelineScheduleKind::GPipe}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.stages) + " stages, " + std::to_string(c.microbatches) + " micro-batches, " +
                 std::to_string(c.pipelines) + " pipelines, " +
                 (c.kind == PipelineScheduleKind::GPipe ? "GPipe" : "1F1B"));
    auto kept = make_model(pipeline(c.stages, c.microbatches, c.kind, c.pipelines), "adam");
    auto recomputed = make_model(pipeline(c.stages, c.microbatches, c.kind, c.pipelines, {}, true), "adam");
    train(*kept, 2);
    train(*recomputed, 2);
    const auto a = kept->get_weights(), b = recomputed->get_weights();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i], b[i])) << "weight " << i;
    const auto sa = kept->optimizer_state(), sb = recomputed->optimizer_state();
    ASSERT_EQ(sa.size(), sb.size());
    for (std::size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(bitwise_equal(sa[i].second, sb[i].second)) << sa[i].first;
    if (c.stages == 2) {  // BatchNormalization in the first stage, uneven micro-batches
      auto bn_kept = batch_norm_model(pipeline(2, c.microbatches, c.kind, c.pipelines, {2}));
      auto bn_recomputed = batch_norm_model(pipeline(2, c.microbatches, c.kind, c.pipelines, {2}, true));
      train(*bn_kept, 2);
      train(*bn_recomputed, 2);
      const auto x = bn_kept->get_weights(), y = bn_recomputed->get_weights();
      for (std::size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(bitwise_equal(x[i], y[i])) << "bn model weight " << i;
    }
  }
}

}  // namespace
}  // namespace mdtrain

namespace mdtrain {
namespace {

// A stage that fails (the last stage's loss rejects a label) aborts the pipe group: the first stage,
// waiting for a gradient that will never come, stops at once with the failure (never a hang or a
// timeout), the error is the loss's, and the next step runs on fresh communicators.
TEST(Pipeline, AFailingStageReleasesTheOthersAndTrainingGoesOn) {
  for (auto kind : {PipelineScheduleKind::GPipe, PipelineScheduleKind::OneFOneB}) {
    auto m = make_model(pipeline(2, 2, kind), "sgd");
    Tensor bad = data_y().clone();
    bad.data<std::int32_t>()[3] = 99;  // 4 classes
    std::vector<std::int64_t> order(kRows);
    std::iota(order.begin(), order.end(), 0);
    try {
      m->train_epoch(data_x(), bad, order.data(), kRows, kBatch, 1, nullptr);
      ADD_FAILURE() << "no exception";
    } catch (const TimeoutError& e) {
      ADD_FAILURE() << "a peer waited until its timeout: " << e.what();
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("99"), std::string::npos) << e.what();
    }
    auto reference = make_model(nullptr, "sgd");
    train(*m, 1);
    train(*reference, 1);
    const auto want = reference->get_weights(), got = m->get_weights();
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_LE(worst_gap(got[i], want[i]), kTolerance);
  }
}

// Across MPI workers a pipeline lies inside one worker, or has stage s on worker s; anything else
// is refused when the strategy is made (pipe_spans_workers: the mesh alone, no MPI needed).
TEST(Pipeline, PipeAxisAcrossWorkersOneStagePerWorkerOrInsideEach) {
  EXPECT_FALSE(pipe_spans_workers(DeviceMesh({2}, {"pipe"}, cpus(2)), "pipe"));  // one process
  // (batch 2, pipe 2) over 2 workers x 2: each worker runs a whole pipeline.
  EXPECT_FALSE(pipe_spans_workers(DeviceMesh::for_workers({2, 2}, {"batch", "pipe"}, 2, cpus(2)), "pipe"));
  // 2 stages over 2 workers x 1, (pipe 2, batch 2) over 2 workers x 2, (pipe 3, batch 2) over 3
  // workers x 2: stage s on worker s.
  EXPECT_TRUE(pipe_spans_workers(DeviceMesh::for_workers({2}, {"pipe"}, 2, cpus(1)), "pipe"));
  EXPECT_TRUE(pipe_spans_workers(DeviceMesh::for_workers({2, 2}, {"pipe", "batch"}, 2, cpus(2)), "pipe"));
  EXPECT_TRUE(pipe_spans_workers(DeviceMesh::for_workers({3, 2}, {"pipe", "batch"}, 3, cpus(2)), "pipe"));
  // Several stages on a worker: 4 stages over 2 workers x 2, (pipe 4, batch 2) over 2 workers x 4,
  // 6 stages over 3 workers x 2 (what for_workers accepts: a pipeline always covers every worker).
  EXPECT_THROW(pipe_spans_workers(DeviceMesh::for_workers({4}, {"pipe"}, 2, cpus(2)), "pipe"), std::invalid_argument);
  EXPECT_THROW(pipe_spans_workers(DeviceMesh::for_workers({4, 2}, {"pipe", "batch"}, 2, cpus(4)), "pipe"),
               std::invalid_argument);
  EXPECT_THROW(pipe_spans_workers(DeviceMesh::for_workers({6}, {"pipe"}, 3, cpus(2)), "pipe"), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
