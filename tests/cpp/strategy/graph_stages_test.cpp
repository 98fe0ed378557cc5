// PipelineStrategy and WavefrontStrategy on layer graphs (functional models): stages start at the
// graph's cut points, a residual block inside a stage runs there whole (a GraphSegment), and the
// weights after training equal the one-device model's within float32 rounding, GPipe and 1F1B
// bitwise equal, with one and two pipelines; the balanced cut never divides a block; a stage start
// inside a block is refused naming the layer; the wavefront runs a graph's recurrent chain and a
// residual head.
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
#include "mdtrain/nn/elementwise_merge.h"
#include "mdtrain/nn/layer_graph.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/lstm.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/pipeline_executor.h"
#include "mdtrain/strategy/pipeline_strategy.h"
#include "mdtrain/strategy/wavefront_executor.h"
#include "mdtrain/strategy/wavefront_strategy.h"

namespace mdtrain {
namespace {

constexpr double kTolerance = 1e-5;
constexpr std::int64_t kRows = 30, kBatch = 11;  // batches of 11, 11, 8: uneven micro-batches

std::vector<Device> cpus(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  return devices;
}

std::shared_ptr<Dense> dense(const std::string& name, std::int64_t units, const std::string& activation) {
  Dense::Options o;
  o.units = units;
  o.activation = activation;
  return std::make_shared<Dense>(name, o);
}

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
  Tensor t(shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// stem -> [b0_dense, b0_add(stem, b0_dense)] -> [b1_dense, b1_add] -> head (softmax): positions
// 0..5, cut points 1, 3, 5.
std::unique_ptr<Model> residual_mlp(std::shared_ptr<Strategy> strategy) {
  auto g = std::make_unique<LayerGraph>(std::vector<Shape>{{6}});
  int x = g->add_node(dense("stem", 8, "relu"), {0});
  for (int b = 0; b < 2; ++b) {
    const std::string p = "b" + std::to_string(b) + "_";
    const int h = g->add_node(dense(p + "dense", 8, b == 0 ? "tanh" : "relu"), {x});
    x = g->add_node(std::make_shared<Add>(p + "add"), {x, h});
  }
  g->set_outputs({g->add_node(dense("head", 4, "softmax"), {x})});
  auto m = std::make_unique<Model>("residual", 17, std::move(g), std::vector<std::string>{"x"});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")),
             std::shared_ptr<Optimizer>(make_optimizer("adam")), {}, std::move(strategy));
  return m;
}

std::shared_ptr<PipelineStrategy> pipeline(int stages, int microbatches, PipelineScheduleKind kind, int pipelines,
                                           std::vector<int> starts) {
  if (pipelines == 1)
    return std::make_shared<PipelineStrategy>(DeviceMesh({stages}, {"pipe"}, cpus(stages)), microbatches, kind,
                                              std::move(starts));
  return std::make_shared<PipelineStrategy>(DeviceMesh({pipelines, stages}, {"batch", "pipe"},
                                                       cpus(pipelines * stages)),
                                            microbatches, kind, std::move(starts), "pipe", std::string("batch"));
}

void train(Model& m, const Tensor& x, const Tensor& y, int epochs) {
  const std::int64_t rows = x.dim(0);
  std::vector<std::int64_t> order(static_cast<std::size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  for (int e = 0; e < epochs; ++e)
    m.train_epoch(x, y, order.data(), rows, kBatch, (rows + kBatch - 1) / kBatch, nullptr);
}

const Tensor& data_x() {
  static const Tensor x = random_tensor({kRows, 6}, 1);
  return x;
}
const Tensor& data_y() {
  static const Tensor y = [] {
    Tensor t({kRows}, DType::Int32);
    for (std::int64_t i = 0; i < kRows; ++i) t.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7) % 4);
    return t;
  }();
  return y;
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
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// (stage starts, pipelines)
class GraphPipelineMatchesOneDevice : public ::testing::TestWithParam<std::tuple<std::vector<int>, int>> {};

TEST_P(GraphPipelineMatchesOneDevice, WeightsAfterTrainingAndSchedulesBitwiseEqual) {
  const auto [starts, pipelines] = GetParam();
  const int stages = static_cast<int>(starts.size()) + 1;
  auto reference = residual_mlp(nullptr);
  auto gpipe_strategy = pipeline(stages, 3, PipelineScheduleKind::GPipe, pipelines, starts);
  auto gpipe = residual_mlp(gpipe_strategy);
  auto one_f_one_b = residual_mlp(pipeline(stages, 3, PipelineScheduleKind::OneFOneB, pipelines, starts));
  const auto start = reference->get_weights();
  for (Model* m : {reference.get(), gpipe.get(), one_f_one_b.get()}) train(*m, data_x(), data_y(), 3);
  std::vector<int> want_starts{0};
  want_starts.insert(want_starts.end(), starts.begin(), starts.end());
  want_starts.push_back(6);
  EXPECT_EQ(gpipe_strategy->executor()->stage_starts(), want_starts);
  const auto want = reference->get_weights(), got = gpipe->get_weights(), other = one_f_one_b->get_weights();
  ASSERT_EQ(want.size(), got.size());
  double moved = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("weight " + std::to_string(i));
    EXPECT_LE(worst_gap(got[i], want[i]), kTolerance);
    EXPECT_TRUE(bitwise_equal(got[i], other[i])) << "GPipe and 1F1B differ";
    moved = std::max(moved, worst_gap(want[i], start[i]));
  }
  EXPECT_GT(moved, 1e-3);  // the comparison is between trained models
  EXPECT_LE(worst_gap(gpipe->predict(data_x(), kBatch), reference->predict(data_x(), kBatch)), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Cuts, GraphPipelineMatchesOneDevice,
                         ::testing::Values(std::make_tuple(std::vector<int>{1}, 1),     // both blocks in stage 1
                                           std::make_tuple(std::vector<int>{3}, 1),     // between the blocks
                                           std::make_tuple(std::vector<int>{1, 3}, 1),  // a block per stage
                                           std::make_tuple(std::vector<int>{3}, 2)));   // 2 pipelines x 2 stages

TEST(GraphPipeline, BalancedCutsStartAtCutPoints) {
  auto strategy = pipeline(3, 3, PipelineScheduleKind::OneFOneB, 1, {});
  auto m = residual_mlp(strategy);
  train(*m, data_x(), data_y(), 1);
  for (int s : strategy->executor()->stage_starts()) EXPECT_TRUE(s == 0 || s == 1 || s == 3 || s == 5 || s == 6) << s;
}

TEST(GraphPipeline, MoreStagesThanTheGraphHasCutsAreRefused) {
  // Cut points 1, 3, 5: four units (stem, two blocks, head) for five stages.
  auto m = residual_mlp(pipeline(5, 5, PipelineScheduleKind::GPipe, 1, {}));
  try {
    train(*m, data_x(), data_y(), 1);
    FAIL() << "five stages were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("can be cut in 3 places only"), std::string::npos) << e.what();
  }
}

TEST(GraphPipeline, AStageStartInsideABlockIsRefusedNamingTheLayer) {
  auto m = residual_mlp(pipeline(2, 2, PipelineScheduleKind::GPipe, 1, {2}));
  try {
    train(*m, data_x(), data_y(), 1);
    FAIL() << "a stage starting at b0_add was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stage 1 cannot start at layer 2"), std::string::npos) << what;
    EXPECT_NE(what.find(R"(layer "b0_add" is inside a block)"), std::string::npos) << what;
    EXPECT_NE(what.find(R"("stem")"), std::string::npos) << what;
  }
}

// r0 -> r1 -> r2 (LSTMs, sequences) -> [mix, Add(r2, mix)] -> head.
std::unique_ptr<Model> recurrent_graph(std::shared_ptr<Strategy> strategy) {
  auto g = std::make_unique<LayerGraph>(std::vector<Shape>{{7, 3}});
  int x = 0;
  for (int i = 0; i < 3; ++i) {
    RecurrentLayer::Options o;
    o.units = 6;
    o.return_sequences = true;
    x = g->add_node(std::make_shared<LSTM>("r" + std::to_string(i), o), {x});
  }
  const int mix = g->add_node(dense("mix", 6, "tanh"), {x});
  const int sum = g->add_node(std::make_shared<Add>("residual"), {x, mix});
  g->set_outputs({g->add_node(dense("head", 2, "linear"), {sum})});
  auto m = std::make_unique<Model>("recurrent", 23, std::move(g), std::vector<std::string>{"x"});
  m->compile(std::shared_ptr<Loss>(make_loss("mse")), std::shared_ptr<Optimizer>(make_optimizer("adam")), {},
             std::move(strategy));
  return m;
}

TEST(GraphWavefront, RecurrentChainAndResidualHeadTrainLikeOneDevice) {
  const Tensor x = random_tensor({13, 7, 3}, 7), y = random_tensor({13, 7, 2}, 8);
  auto reference = recurrent_graph(nullptr);
  auto strategy = std::make_shared<WavefrontStrategy>(DeviceMesh({3}, {"pipe"}, cpus(3)), 3);
  auto wave = recurrent_graph(strategy);
  const auto start = reference->get_weights();
  train(*reference, x, y, 2);
  train(*wave, x, y, 2);
  const WavefrontExecutor* executor = strategy->executor();
  ASSERT_NE(executor, nullptr);
  EXPECT_EQ(executor->stage_starts(), (std::vector<int>{0, 1, 2}));
  const auto want = reference->get_weights(), got = wave->get_weights();
  ASSERT_EQ(want.size(), got.size());
  double moved = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_LE(worst_gap(got[i], want[i]), kTolerance) << "weight " << i;
    moved = std::max(moved, worst_gap(want[i], start[i]));
  }
  EXPECT_GT(moved, 1e-3);
}

}  // namespace
}  // namespace mdtrain
