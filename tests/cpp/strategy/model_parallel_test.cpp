// ModelParallelStrategy (tensor parallelism on logical CPU devices, and the hybrid batch x model
// mesh): for every sharded layer and split direction, forward, gradients and weights after
// several SGD / Adam steps equal the unsharded model on one device within float32 rounding
// (kTolerance), with uneven batches; two runs are bitwise equal; each device holds 1/k of the
// sharded weights and of their optimizer state; unsupported layouts are invalid_argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/conv2d.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/embedding.h"
#include "mdtrain/nn/elementwise_merge.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/layer_graph.h"
#include "mdtrain/nn/layer_normalization.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/tensor_parallel/column_parallel.h"
#include "mdtrain/nn/tensor_parallel/dim_slices.h"
#include "mdtrain/nn/tensor_parallel/row_parallel_dense.h"
#include "mdtrain/nn/tensor_parallel/split_dropout.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/optim/sgd.h"
#include "mdtrain/strategy/model_parallel_executor.h"
#include "mdtrain/strategy/model_parallel_strategy.h"

namespace mdtrain {
namespace {

// |a - b| <= kTolerance * (1 + |b|): float32 rounding of sums taken in another order (partial
// products summed over shards), through a few optimizer steps. Measured: at most 7e-8.
constexpr double kTolerance = 1e-6;
constexpr std::int64_t kRows = 29, kBatch = 7;  // batches of 7 (the last of 1): uneven slices on 2 batch groups

std::vector<Device> cpus(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  return devices;
}

DeviceMesh model_mesh() { return DeviceMesh({2}, {"model"}, cpus(2)); }
DeviceMesh hybrid_mesh() { return DeviceMesh({2, 2}, {"batch", "model"}, cpus(4)); }

std::shared_ptr<ModelParallelStrategy> model_parallel(const DeviceMesh& mesh, WeightLayouts layouts) {
  const bool hybrid = mesh.has_axis("batch");
  return std::make_shared<ModelParallelStrategy>(mesh, std::move(layouts),
                                                 hybrid ? std::optional<std::string>("batch") : std::nullopt);
}

Dense::Options dense(std::int64_t units, const std::string& activation) {
  Dense::Options o;
  o.units = units;
  o.activation = activation;
  o.kernel_regularizer = Json::parse(R"({"class_name": "L2", "config": {"l2": 0.01}})");
  return o;
}

// A model of the test: its layers and input, its data (x, y) and loss, and the layouts to split it.
struct Case {
  std::string name;
  std::function<void(Model&)> add_layers;
  Shape input;
  Tensor x, y;
  std::string loss;
  WeightLayouts layouts;
};

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

const WeightLayout kColumns{std::nullopt, std::string("model")};
const WeightLayout kRowsSplit{std::string("model"), std::nullopt};

// Column-parallel Dense -> ReLU inside -> Dropout -> row-parallel Dense (the f/g pair: activations
// stay split), then a column-parallel softmax output (gathered).
Case fg_pair() {
  Case c{"fg_pair", nullptr, {6}, features({kRows, 6}, 1), classes(kRows, 4), "sparse_categorical_crossentropy", {}};
  c.add_layers = [](Model& m) {
    m.add(std::make_shared<Dense>("dense", dense(16, "relu")));
    m.add(std::make_shared<Dropout>("dropout", 0.3, 11));
    m.add(std::make_shared<ActivationLayer>("activation", "tanh"));
    m.add(std::make_shared<Dense>("dense_1", dense(8, "relu")));
    m.add(std::make_shared<Dense>("dense_2", dense(4, "softmax")));
  };
  c.layouts = {{"dense/kernel", kColumns},
               {"dense/bias", {std::string("model")}},
               {"dense_1/kernel", kRowsSplit},
               {"dense_2/kernel", kColumns}};
  return c;
}

// Column-parallel Dense alone (gathered, feeding a replicated layer), then a row-parallel Dense
// whose input is whole (each shard takes its piece).
Case column_then_row() {
  Case c{"column_then_row",
         nullptr,
         {6},
         features({kRows, 6}, 2),
         classes(kRows, 3),
         "sparse_categorical_crossentropy",
         {}};
  c.add_layers = [](Model& m) {
    m.add(std::make_shared<Dense>("dense", dense(8, "gelu")));
    m.add(std::make_shared<Dense>("dense_1", dense(10, "tanh")));
    m.add(std::make_shared<Dense>("dense_2", dense(3, "softmax")));
  };
  c.layouts = {{"dense/kernel", kColumns}, {"dense_2/kernel", kRowsSplit}};
  return c;
}

Case conv_by_channels() {
  Case c{
      "conv", nullptr, {5, 5, 2}, features({kRows, 5, 5, 2}, 3), classes(kRows, 3), "sparse_categorical_crossentropy",
      {}};
  c.add_layers = [](Model& m) {
    Conv2D::Options o;
    o.filters = 6;
    o.kernel_size = {3, 3};
    o.activation = "relu";
    m.add(std::make_shared<Conv2D>("conv2d", o));
    m.add(std::make_shared<Flatten>("flatten"));
    m.add(std::make_shared<Dense>("dense", dense(3, "softmax")));
  };
  c.layouts = {{"conv2d/kernel", {std::nullopt, std::nullopt, std::nullopt, std::string("model")}}};
  return c;
}

Tensor indices(std::int64_t rows, std::int64_t length, std::int64_t vocabulary) {
  Tensor x({rows, length}, DType::Float32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 5 + i / 3) % vocabulary);
  return x;
}

Embedding::Options embedding(std::int64_t vocabulary, std::int64_t dim) {
  Embedding::Options o;
  o.input_dim = vocabulary;
  o.output_dim = dim;
  return o;
}

Case embedding_by_rows() {
  Case c{
      "embedding_rows", nullptr, {4}, indices(kRows, 4, 12), classes(kRows, 3), "sparse_categorical_crossentropy", {}};
  c.add_layers = [](Model& m) {
    m.add(std::make_shared<Embedding>("embedding", embedding(12, 6)));
    m.add(std::make_shared<Flatten>("flatten"));
    m.add(std::make_shared<Dense>("dense", dense(3, "softmax")));
  };
  c.layouts = {{"embedding/embeddings", kRowsSplit}};
  return c;
}

// Embedding split by columns feeding a row-parallel Dense through an activation: no gather.
Case embedding_by_columns() {
  Case c{"embedding_columns",
         nullptr,
         {4},
         indices(kRows, 4, 10),
         classes(kRows, 3),
         "sparse_categorical_crossentropy",
         {}};
  c.add_layers = [](Model& m) {
    m.add(std::make_shared<Embedding>("embedding", embedding(10, 8)));
    m.add(std::make_shared<ActivationLayer>("activation", "relu"));
    m.add(std::make_shared<Dense>("dense", dense(4, "tanh")));
    m.add(std::make_shared<Flatten>("flatten"));
    m.add(std::make_shared<Dense>("dense_1", dense(3, "softmax")));
  };
  c.layouts = {{"embedding/embeddings", kColumns}, {"dense/kernel", kRowsSplit}};
  return c;
}

std::vector<Case> all_cases() {
  return {fg_pair(), column_then_row(), conv_by_channels(), embedding_by_rows(), embedding_by_columns()};
}

std::unique_ptr<Model> make_model(const Case& c, std::shared_ptr<Strategy> strategy, const std::string& optimizer) {
  auto m = std::make_unique<Model>("m", 5);
  c.add_layers(*m);
  m->build(c.input);
  std::shared_ptr<Optimizer> opt =
      optimizer == "sgd" ? std::shared_ptr<Optimizer>(std::make_shared<SGD>(0.05, 0.9)) : make_optimizer("adam");
  m->compile(std::shared_ptr<Loss>(make_loss(c.loss)), opt, {"accuracy"}, std::move(strategy));
  return m;
}

void train(Model& m, const Case& c, int epochs) {
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  for (int e = 0; e < epochs; ++e)
    m.train_epoch(c.x, c.y, order.data(), kRows, kBatch, (kRows + kBatch - 1) / kBatch, nullptr);
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

class ModelParallelMatchesOneDevice : public ::testing::TestWithParam<std::tuple<int, bool, std::string>> {};

TEST_P(ModelParallelMatchesOneDevice, ForwardLossAndWeightsAfterTraining) {
  const auto [which, hybrid, optimizer] = GetParam();
  const Case c = all_cases()[static_cast<std::size_t>(which)];
  SCOPED_TRACE(c.name + (hybrid ? " on 2x2 batch x model" : " on 2 model shards") + " with " + optimizer);
  auto reference = make_model(c, nullptr, optimizer);
  auto split = make_model(c, model_parallel(hybrid ? hybrid_mesh() : model_mesh(), c.layouts), optimizer);
  // Forward (predict, uneven batches) before training.
  EXPECT_LE(worst_gap(split->predict(c.x, kBatch), reference->predict(c.x, kBatch)), kTolerance);
  train(*reference, c, 3);
  train(*split, c, 3);
  const auto want = reference->get_weights(), got = split->get_weights();
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("weight " + std::to_string(i));
    EXPECT_LE(worst_gap(got[i], want[i]), kTolerance);
  }
  // The optimizer state is unsharded (checkpoints hold logical tensors).
  const auto want_state = reference->optimizer_state(), got_state = split->optimizer_state();
  ASSERT_EQ(want_state.size(), got_state.size());
  for (std::size_t i = 1; i < want_state.size(); ++i) {
    EXPECT_EQ(want_state[i].first, got_state[i].first);
    EXPECT_LE(worst_gap(got_state[i].second, want_state[i].second), kTolerance) << want_state[i].first;
  }
  EXPECT_LE(worst_gap(split->predict(c.x, kBatch), reference->predict(c.x, kBatch)), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(EveryShardedLayer, ModelParallelMatchesOneDevice,
                         ::testing::Combine(::testing::Range(0, 5), ::testing::Bool(),
                                            ::testing::Values(std::string("sgd"), std::string("adam"))));

TEST(ModelParallel, FourModelShardsMatchOneDevice) {
  for (const Case& c : {fg_pair(), embedding_by_rows()}) {
    SCOPED_TRACE(c.name);
    auto reference = make_model(c, nullptr, "adam");
    auto split = make_model(c, model_parallel(DeviceMesh({4}, {"model"}, cpus(4)), c.layouts), "adam");
    train(*reference, c, 2);
    train(*split, c, 2);
    const auto want = reference->get_weights(), got = split->get_weights();
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_LE(worst_gap(got[i], want[i]), kTolerance) << i;
  }
}

// Megatron's f/g pairing: the column-parallel Dense feeding the row-parallel one through ReLU,
// Dropout and tanh keeps its output split (no gather), its Dropout drawing the unsharded masks
// (the equality above); the softmax output gathers.
TEST(ModelParallel, ColumnFeedingRowThroughElementWiseLayersIsNotGathered) {
  const Case c = fg_pair();
  auto strategy = model_parallel(model_mesh(), c.layouts);
  auto m = make_model(c, strategy, "sgd");
  train(*m, c, 1);
  auto& shard = dynamic_cast<LayerStack&>(strategy->executor()->replica_network(1));
  const auto& layers = shard.layers();
  auto* column = dynamic_cast<ColumnParallel*>(layers[0].get());
  ASSERT_NE(column, nullptr);
  EXPECT_FALSE(column->gathers_output());
  EXPECT_EQ(layers[0]->output_shape(), Shape({8}));
  EXPECT_NE(dynamic_cast<SplitDropout*>(layers[1].get()), nullptr);
  auto* row = dynamic_cast<RowParallelDense*>(layers[3].get());
  ASSERT_NE(row, nullptr);
  EXPECT_TRUE(row->input_split());
  auto* out = dynamic_cast<ColumnParallel*>(layers[4].get());
  ASSERT_NE(out, nullptr);
  EXPECT_TRUE(out->gathers_output());
  EXPECT_EQ(layers[4]->output_shape(), Shape({4}));
}

// In a layer graph the f/g pairing follows the edges: a column-parallel output stays split only
// while each value on the way has one reader; one that a residual Add also reads is gathered.
TEST(ModelParallel, PairingInALayerGraphFollowsItsEdges) {
  const WeightLayouts layouts = {{"up/kernel", {std::nullopt, "model"}}, {"down/kernel", {"model", std::nullopt}}};
  auto graph = [](bool residual) {
    auto g = std::make_unique<LayerGraph>(std::vector<Shape>{{6}});
    const int up = g->add_node(std::make_shared<Dense>("up", dense(8, "relu")), {0});
    const int drop = g->add_node(std::make_shared<Dropout>("drop", 0.5, 9), {up});
    int h = g->add_node(std::make_shared<Dense>("down", dense(8, "linear")), {drop});
    if (residual) h = g->add_node(std::make_shared<Add>("add"), {up, h});
    g->set_outputs({g->add_node(std::make_shared<Dense>("head", dense(2, "linear")), {h})});
    g->build(4);
    return g;
  };
  using Kind = TensorParallelPlan::Kind;
  auto chain = graph(false);
  const TensorParallelPlan paired(*chain, layouts, model_mesh(), "model");
  EXPECT_EQ(paired.kind(0), Kind::ColumnDense);
  EXPECT_EQ(paired.kind(1), Kind::SplitDropout);
  EXPECT_EQ(paired.kind(2), Kind::RowDense);
  auto block = graph(true);
  const TensorParallelPlan gathered(*block, layouts, model_mesh(), "model");
  EXPECT_EQ(gathered.kind(0), Kind::ColumnDense);
  EXPECT_EQ(gathered.kind(1), Kind::Replicated);
  EXPECT_EQ(gathered.kind(2), Kind::RowDense);
  EXPECT_EQ(gathered.kind(3), Kind::Replicated);
  // A layout on a layer with no sharded form names it.
  try {
    TensorParallelPlan(*block, {{"head/kernel", {std::nullopt, "model"}}, {"add/kernel", {std::nullopt, "model"}}},
                       model_mesh(), "model");
    FAIL() << "a layout for a weight the Add does not have was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'add'"), std::string::npos) << e.what();
  }
}

TEST(ModelParallel, TwoRunsAreBitwiseEqual) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name);
    auto a = make_model(c, model_parallel(hybrid_mesh(), c.layouts), "adam");
    auto b = make_model(c, model_parallel(hybrid_mesh(), c.layouts), "adam");
    train(*a, c, 2);
    train(*b, c, 2);
    const auto wa = a->get_weights(), wb = b->get_weights();
    for (std::size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(bitwise_equal(wa[i], wb[i])) << "weight " << i;
  }
}

// The gradients of one step on 2 model shards, each shard's piece against the unsharded model's.
TEST(ModelParallel, GradientsArePiecesOfTheUnshardedGradients) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name);
    auto m = make_model(c, nullptr, "sgd");
    LayerStack& primary = m->stack();
    auto reference = primary.clone();
    auto strategy = model_parallel(model_mesh(), c.layouts);
    SGD sgd(0.0);  // lr 0: the weights stay, the gradients are left in the shards
    auto loss = make_loss(c.loss);
    auto executor = strategy->make_executor(primary, *loss, sgd);
    std::vector<std::int64_t> rows(kBatch);
    std::iota(rows.begin(), rows.end(), 3);
    executor->train_step(GlobalBatch{c.x, c.y, rows.data(), kBatch}, nullptr);

    Shape xs = c.x.shape();
    xs[0] = kBatch;
    Tensor xb(xs, DType::Float32), yb({kBatch}, DType::Int32);
    ops::gather_rows(c.x, rows.data(), kBatch, xb);
    ops::gather_rows(c.y, rows.data(), kBatch, yb);
    ForwardContext ctx;
    ctx.training = true;
    reference->forward(xb, ctx);
    auto logits_loss = loss->on_logits_of(reference->output_activation());
    ASSERT_TRUE(logits_loss);
    Tensor dlogits(reference->logits().shape(), DType::Float32);
    logits_loss->forward_backward(yb, reference->logits(), 1.0 / kBatch, &dlogits);
    reference->backward_from_logits(dlogits);
    reference->add_regularization_gradients();

    auto& plan = static_cast<ModelParallelExecutor&>(*executor).plan();
    const ParameterList want = reference->trainable_parameters();
    for (int k = 0; k < 2; ++k) {
      const ParameterList got = executor->replica_network(k).trainable_parameters();
      ASSERT_EQ(want.size(), got.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        SCOPED_TRACE(want[i]->name + " on shard " + std::to_string(k));
        const int d = plan.split_dim(want[i]->name);
        Tensor piece(got[i]->grad.shape(), DType::Float32);
        if (d < 0) piece.copy_from(want[i]->grad);
        else copy_piece_out(want[i]->grad, d, k, 2, piece);
        EXPECT_LE(worst_gap(got[i]->grad, piece), kTolerance);
      }
    }
  }
}

// Sharded weights and their optimizer slots cost each device 1/k of the unsharded bytes: measured
// on the buffers each device allocated (its packed weights, its optimizer's slots).
TEST(ModelParallel, EachDeviceHoldsItsShareOfWeightsAndOptimizerState) {
  const Case c = fg_pair();
  auto reference = make_model(c, nullptr, "adam");
  train(*reference, c, 1);
  std::int64_t sharded = 0, replicated = 0;  // unsharded bytes
  for (auto* p : reference->stack().parameters()) {
    const bool split = p->name == "dense/kernel" || p->name == "dense/bias" || p->name == "dense_1/kernel" ||
                       p->name == "dense_2/kernel" || p->name == "dense_2/bias";
    (split ? sharded : replicated) += static_cast<std::int64_t>(p->value.nbytes());
  }
  ASSERT_GT(sharded, 0);
  ASSERT_GT(replicated, 0);  // dense_1/bias
  {
    auto strategy = model_parallel(model_mesh(), c.layouts);
    auto m = make_model(c, strategy, "adam");
    train(*m, c, 1);
    ASSERT_NE(strategy->executor(), nullptr);
    const auto params = strategy->executor()->parameter_bytes();
    const auto state = strategy->executor()->optimizer_state_bytes();
    const std::int64_t per_device = sharded / 2 + replicated;
    ASSERT_EQ(params.size(), 2u);
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(params[d], per_device);
      EXPECT_EQ(state[d], 2 * per_device);  // Adam: momentum and velocity
      // The weights are views into that one packed buffer (nothing else holds them).
      Network& net = strategy->executor()->replica_network(d);
      std::int64_t viewed = 0;
      for (auto* p : net.trainable_parameters()) viewed += static_cast<std::int64_t>(p->value.nbytes());
      EXPECT_EQ(viewed, static_cast<std::int64_t>(net.packed_values().nbytes()));
    }
    // The last step had 1 row (29 = 4 x 7 + 1). Model-axis traffic per device: dense_1's partial
    // products (8 floats a row), dense_2's gathered output (4) and its summed input gradient (8);
    // nothing for dense's split output (f/g pairing) nor its input gradient (first layer).
    for (auto bytes : strategy->executor()->model_axis_bytes()) EXPECT_EQ(bytes, 1 * (8 + 4 + 8) * 4);
  }
  {
    // 2x2: the model axis splits by the layouts, ZeRO-1 splits each shard's state over the batch axis.
    auto strategy = model_parallel(hybrid_mesh(), c.layouts);
    auto m = make_model(c, strategy, "adam");
    train(*m, c, 1);
    const auto params = strategy->executor()->parameter_bytes();
    const auto state = strategy->executor()->optimizer_state_bytes();
    for (int d = 0; d < 4; ++d) EXPECT_EQ(params[d], sharded / 2 + replicated);
    // Devices (0, m) and (1, m) hold the two ZeRO ranges of shard m's state.
    for (int m2 = 0; m2 < 2; ++m2) EXPECT_EQ(state[m2] + state[2 + m2], 2 * (sharded / 2 + replicated));
    for (int d = 0; d < 4; ++d) EXPECT_LT(state[d], 2 * (sharded / 2 + replicated));
    EXPECT_GT(strategy->executor()->model_axis_bytes()[0], 0);
  }
}

TEST(ModelParallel, ACheckpointLoadsUnderAnotherStrategy) {
  // The unsharded state and weights of a split model continue training on one device exactly as
  // they would have under the split model (to rounding).
  const Case c = fg_pair();
  auto split = make_model(c, model_parallel(hybrid_mesh(), c.layouts), "adam");
  auto reference = make_model(c, nullptr, "adam");
  train(*split, c, 1);
  train(*reference, c, 1);
  auto resumed = make_model(c, nullptr, "adam");
  resumed->set_weights(split->get_weights());
  resumed->set_optimizer_state(split->optimizer_state());
  train(*resumed, c, 1);
  train(*reference, c, 1);
  const auto want = reference->get_weights(), got = resumed->get_weights();
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_LE(worst_gap(got[i], want[i]), kTolerance) << i;
  // And back: a one-device state scattered into a split model.
  auto back = make_model(c, model_parallel(model_mesh(), c.layouts), "adam");
  back->set_weights(reference->get_weights());
  back->set_optimizer_state(reference->optimizer_state());
  train(*back, c, 1);
  train(*reference, c, 1);
  const auto want2 = reference->get_weights(), got2 = back->get_weights();
  for (std::size_t i = 0; i < want2.size(); ++i) EXPECT_LE(worst_gap(got2[i], want2[i]), kTolerance) << i;
}

void expect_refused(const Case& c, const DeviceMesh& mesh, const WeightLayouts& layouts, const std::string& fragment) {
  try {
    auto m = make_model(c, model_parallel(mesh, layouts), "sgd");
    train(*m, c, 1);
    ADD_FAILURE() << "no error for " << fragment;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[model_parallel]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(ModelParallel, UnsupportedLayoutsAreInvalidArgumentsNamingLayerWeightAndLayout) {
  const Case c = column_then_row();
  // dense_2 has 3 units: not divisible by 2.
  expect_refused(c, model_mesh(), {{"dense_2/kernel", kColumns}}, "'dense_2/kernel'");
  expect_refused(c, model_mesh(), {{"dense_2/kernel", kColumns}}, "not divisible");
  expect_refused(c, model_mesh(), {{"nope/kernel", kColumns}}, "no layer named 'nope'");
  expect_refused(c, model_mesh(), {{"dense/gamma", kColumns}}, "has no weight 'dense/gamma'");
  expect_refused(c, model_mesh(), {{"dense/kernel", {std::nullopt}}}, "1 entries");
  expect_refused(c, model_mesh(), {{"dense/kernel", {std::string("model"), std::string("model")}}}, "one dimension");
  expect_refused(c, hybrid_mesh(), {{"dense/kernel", {std::nullopt, std::string("batch")}}}, "model axis 'model' only");
  expect_refused(c, model_mesh(), {{"dense/bias", {std::string("model")}}}, "'dense/bias'");
  const Case conv = conv_by_channels();
  expect_refused(conv, model_mesh(),
                 {{"conv2d/kernel", {std::nullopt, std::nullopt, std::string("model"), std::nullopt}}},
                 "output channels only");
  Case norm{"norm", nullptr, {6}, features({kRows, 6}, 1), classes(kRows, 2), "sparse_categorical_crossentropy", {}};
  norm.add_layers = [](Model& m) {
    m.add(std::make_shared<LayerNormalization>("layer_normalization", LayerNormalization::Options{}));
    m.add(std::make_shared<Dense>("dense", dense(2, "softmax")));
  };
  expect_refused(norm, model_mesh(), {{"layer_normalization/gamma", {std::string("model")}}},
                 "LayerNormalization has no sharded form");
  // An axis not in the mesh: refused by the strategy itself.
  EXPECT_THROW(model_parallel(model_mesh(), {{"dense/kernel", {std::nullopt, std::string("tensor")}}}),
               std::invalid_argument);
  EXPECT_THROW(ModelParallelStrategy(model_mesh(), {}, std::string("batch")), std::invalid_argument);
}

TEST(ModelParallel, ClippingByNormIsRefused) {
  const Case c = fg_pair();
  auto m = std::make_unique<Model>("m", 5);
  c.add_layers(*m);
  m->build(c.input);
  OptimizerOptions o;
  o.clipnorm = 1.0;
  m->compile(std::shared_ptr<Loss>(make_loss(c.loss)), std::make_shared<SGD>(0.1, 0.0, false, o), {},
             model_parallel(model_mesh(), c.layouts));
  try {
    train(*m, c, 1);
    ADD_FAILURE() << "clipnorm was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("clipnorm"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mdtrain
