// LayerGraph (the functional model's Network) and the merge layers: forward values, gradients
// against finite differences in float64, gradient order (GradientsFinal), and a chain graph equal
// to a LayerStack bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/concatenate.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/elementwise_merge.h"
#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/layer_graph.h"
#include "mdtrain/nn/layer_stack.h"

namespace mdtrain {
namespace {

using testing::dot;
using testing::expect_close;
using testing::numeric_gradient;
using testing::random_tensor;

std::shared_ptr<Dense> dense(const std::string& name, std::int64_t units, const std::string& activation = "linear") {
  Dense::Options o;
  o.units = units;
  o.activation = activation;
  return std::make_shared<Dense>(name, o);
}

Tensor filled(const Shape& shape, std::vector<double> values) {
  Tensor t(shape, DType::Float64);
  for (std::size_t i = 0; i < values.size(); ++i) t.data<double>()[i] = values[i];
  return t;
}

std::vector<double> values_of(const Tensor& t) {
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

TEST(MergeLayers, AddMultiplyConcatenateForwardAndBackward) {
  const Tensor a = filled({2, 2}, {1, 2, 3, 4}), b = filled({2, 2}, {10, 20, 30, 40});
  const Tensor dy = filled({2, 2}, {1, -1, 2, 0.5});
  Add add("add");
  add.build_inputs({{2}, {2}}, DType::Float64);
  EXPECT_EQ(values_of(add.forward_inputs({a, b})), (std::vector<double>{11, 22, 33, 44}));
  auto da = add.backward_inputs(dy);
  ASSERT_EQ(da.size(), 2u);
  EXPECT_EQ(values_of(da[1]), values_of(dy));

  Multiply mul("mul");
  mul.build_inputs({{2}, {2}}, DType::Float64);
  EXPECT_EQ(values_of(mul.forward_inputs({a, b})), (std::vector<double>{10, 40, 90, 160}));
  auto dm = mul.backward_inputs(dy);
  EXPECT_EQ(values_of(dm[0]), (std::vector<double>{10, -20, 60, 20}));  // dy * b
  EXPECT_EQ(values_of(dm[1]), (std::vector<double>{1, -2, 6, 2}));      // dy * a

  Concatenate cat("cat", -1);
  cat.build_inputs({{2}, {1}}, DType::Float64);
  EXPECT_EQ(cat.output_shape(), (Shape{3}));
  const Tensor c = filled({2, 1}, {7, 8});
  EXPECT_EQ(values_of(cat.forward_inputs({a, c})), (std::vector<double>{1, 2, 7, 3, 4, 8}));
  auto dc = cat.backward_inputs(filled({2, 3}, {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(values_of(dc[0]), (std::vector<double>{1, 2, 4, 5}));
  EXPECT_EQ(values_of(dc[1]), (std::vector<double>{3, 6}));

  // Along a middle axis: (batch, 2, 1) and (batch, 1, 1) -> (batch, 3, 1).
  Concatenate mid("mid", 1);
  mid.build_inputs({{2, 1}, {1, 1}}, DType::Float64);
  EXPECT_EQ(mid.output_shape(), (Shape{3, 1}));
  EXPECT_EQ(values_of(mid.forward_inputs({a.reshape({2, 2, 1}), c.reshape({2, 1, 1})})),
            (std::vector<double>{1, 2, 7, 3, 4, 8}));
}

TEST(MergeLayers, RefuseShapesThatDoNotMergeNamingTheLayer) {
  Add add("my_add");
  try {
    add.build_inputs({{3}, {4}});
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("my_add"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(3,) and (4,)"), std::string::npos) << e.what();
  }
  Concatenate cat("my_cat", 0);
  EXPECT_THROW(cat.build_inputs({{3}, {3}}), std::invalid_argument);
  Concatenate cat2("my_cat2", -1);
  EXPECT_THROW(cat2.build_inputs({{2, 3}, {3, 3}}), std::invalid_argument);
  EXPECT_NO_THROW(cat2.build_inputs({{2, 3}, {2, 5}}));
  EXPECT_THROW(add.build_inputs({{3}}), std::invalid_argument);
}

TEST(MergeLayers, ConfigsRoundTripThroughTheFactory) {
  Concatenate cat("c", 1);
  auto copy = layer_from_config(layer_to_config(cat));
  EXPECT_EQ(copy->class_name(), "Concatenate");
  EXPECT_EQ(dynamic_cast<Concatenate&>(*copy).axis(), 1);
  EXPECT_EQ(layer_from_config(layer_to_config(Add("a")))->class_name(), "Add");
  EXPECT_EQ(layer_from_config(layer_to_config(Multiply("m")))->class_name(), "Multiply");
}

// x -> d1 -> d2 -> Add(d1, d2) -> Concatenate(add, d1) -> Multiply(cat, cat) -> out: d1's output
// is read by three nodes, so its gradient is a sum.
std::unique_ptr<LayerGraph> residual_graph() {
  auto g = std::make_unique<LayerGraph>(std::vector<Shape>{{3}});
  const int d1 = g->add_node(dense("d1", 4, "tanh"), {0});
  const int d2 = g->add_node(dense("d2", 4, "gelu"), {d1});
  const int sum = g->add_node(std::make_shared<Add>("add"), {d1, d2});
  const int cat = g->add_node(std::make_shared<Concatenate>("cat"), {sum, d1});
  const int mul = g->add_node(std::make_shared<Multiply>("mul"), {cat, cat});
  const int out = g->add_node(dense("out", 2, "softmax"), {mul});
  g->set_outputs({out});
  return g;
}

TEST(LayerGraphGradient, MatchesFiniteDifferencesThroughMergesAndFanOut) {
  std::mt19937_64 rng(3);
  auto g = residual_graph();
  g->build(11, DType::Float64);
  Tensor x = random_tensor({5, 3}, rng);
  ForwardContext ctx{true, 1, 0};
  Tensor y = g->forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{5, 2}));
  const Tensor G = random_tensor(y.shape(), rng);
  std::vector<std::int64_t> finals;
  g->backward(G, [&](std::int64_t first) { finals.push_back(first); });
  const Tensor grads = g->packed_grads().clone();
  auto loss = [&] { return dot(G, g->forward(x, ctx)); };
  expect_close(grads, numeric_gradient(g->packed_values(), loss), "packed gradients");
  // One report per node, moving down only, ending at 0.
  ASSERT_EQ(finals.size(), 6u);
  for (std::size_t i = 1; i < finals.size(); ++i) EXPECT_LE(finals[i], finals[i - 1]);
  EXPECT_EQ(finals.back(), 0);
}

TEST(LayerGraphGradient, BackwardFromLogitsMatchesBackwardThroughTheSoftmax) {
  std::mt19937_64 rng(4);
  auto g = residual_graph();
  g->build(12, DType::Float64);
  ASSERT_EQ(g->output_activation(), Activation::Softmax);
  Tensor x = random_tensor({4, 3}, rng);
  Tensor y = g->forward(x, ForwardContext{}).clone();
  // d(sum(G * softmax(z)))/dz = y * (G - sum(G * y)).
  const Tensor G = random_tensor(y.shape(), rng);
  Tensor dz(y.shape(), DType::Float64);
  for (std::int64_t r = 0; r < 4; ++r) {
    double s = 0;
    for (int c = 0; c < 2; ++c) s += G.data<double>()[r * 2 + c] * y.data<double>()[r * 2 + c];
    for (int c = 0; c < 2; ++c)
      dz.data<double>()[r * 2 + c] = y.data<double>()[r * 2 + c] * (G.data<double>()[r * 2 + c] - s);
  }
  g->backward(G);
  const Tensor via_output = g->packed_grads().clone();
  g->forward(x, ForwardContext{});
  g->backward_from_logits(dz, {});
  expect_close(g->packed_grads(), values_of(via_output), "gradients from logits");
}

TEST(LayerGraph, ChainEqualsLayerStackBitwise) {
  std::mt19937_64 rng(5);
  LayerStack stack;
  auto g = std::make_unique<LayerGraph>(std::vector<Shape>{{6}});
  int v = 0;
  for (int i = 0; i < 3; ++i) {
    stack.add(dense("d" + std::to_string(i), 5, "relu"));
    v = g->add_node(dense("d" + std::to_string(i), 5, "relu"), {v});
  }
  stack.add(std::make_shared<Dropout>("drop", 0.5, 9));
  v = g->add_node(std::make_shared<Dropout>("drop", 0.5, 9), {v});
  stack.add(dense("out", 3, "softmax"));
  v = g->add_node(dense("out", 3, "softmax"), {v});
  g->set_outputs({v});
  stack.build({6}, 77);
  g->build(77);
  ASSERT_EQ(stack.trainable_count(), g->trainable_count());
  ASSERT_EQ(0, std::memcmp(stack.packed_values().raw(), g->packed_values().raw(), stack.packed_values().nbytes()));
  Tensor x = random_tensor({8, 6}, rng, -1, 1, DType::Float32);
  ForwardContext ctx{true, 3, 0};
  Tensor ys = stack.forward(x, ctx).clone(), yg = g->forward(x, ctx).clone();
  ASSERT_EQ(0, std::memcmp(ys.raw(), yg.raw(), ys.nbytes()));
  Tensor dz = random_tensor(ys.shape(), rng, -1, 1, DType::Float32);
  std::vector<std::int64_t> fs, fg;
  stack.backward_from_logits(dz, [&](std::int64_t f) { fs.push_back(f); });
  g->backward_from_logits(dz, [&](std::int64_t f) { fg.push_back(f); });
  EXPECT_EQ(fs, fg);
  EXPECT_EQ(0, std::memcmp(stack.packed_grads().raw(), g->packed_grads().raw(), stack.packed_grads().nbytes()));
}

TEST(LayerGraph, SeveralInputsAndOutputsTravelPacked) {
  auto g = std::make_unique<LayerGraph>(std::vector<Shape>{{2}, {1}});
  const int cat = g->add_node(std::make_shared<Concatenate>("cat"), {0, 1});
  const int a = g->add_node(std::make_shared<ActivationLayer>("id", "linear"), {cat});
  g->set_outputs({a, 1});
  g->build(1, DType::Float64);
  EXPECT_EQ(g->input_shape(), (Shape{3}));
  EXPECT_EQ(g->output_shape(), (Shape{4}));
  const Tensor x = filled({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(values_of(g->forward(x, ForwardContext{})), (std::vector<double>{1, 2, 3, 3, 4, 5, 6, 6}));
}

TEST(LayerGraph, RefusesMalformedGraphsNamingTheLayer) {
  auto g = std::make_unique<LayerGraph>(std::vector<Shape>{{3}});
  auto d = dense("d", 2);
  const int v = g->add_node(d, {0});
  EXPECT_THROW(g->add_node(dense("d", 2), {v}), std::invalid_argument);                 // a second "d"
  EXPECT_THROW(g->add_node(dense("e", 2), {5}), std::invalid_argument);                 // undefined value
  EXPECT_THROW(g->add_node(std::make_shared<Add>("add"), {v}), std::invalid_argument);  // one input to a merge
  g->add_node(dense("dangling", 2), {v});
  try {
    g->set_outputs({v});
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dangling"), std::string::npos) << e.what();
  }
  auto h = std::make_unique<LayerGraph>(std::vector<Shape>{{3}});
  const int a = h->add_node(dense("a", 2), {0});
  const int b = h->add_node(dense("b", 4), {0});
  h->set_outputs({h->add_node(std::make_shared<Add>("bad_add"), {a, b})});
  try {
    h->build(1);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bad_add"), std::string::npos) << e.what();
  }
}

// input a, input b -> one Dense "shared" called on both -> add -> head.
std::unique_ptr<LayerGraph> siamese_graph() {
  auto g = std::make_unique<LayerGraph>(std::vector<Shape>{{3}, {3}});
  auto shared = dense("shared", 4, "tanh");
  const int ea = g->add_node(shared, {0});
  const int eb = g->add_node(shared, {1});
  const int sum = g->add_node(std::make_shared<Multiply>("product"), {ea, eb});
  g->set_outputs({g->add_node(dense("head", 2), {sum})});
  return g;
}

TEST(LayerGraphSharing, OneLayerCalledTwiceHasOneSetOfWeightsAndTheSumOfTheGradients) {
  std::mt19937_64 rng(5);
  auto g = siamese_graph();
  g->build(17, DType::Float64);
  EXPECT_TRUE(g->has_shared_layers());
  ASSERT_EQ(g->layers().size(), 3u);  // shared, product, head
  EXPECT_EQ(g->packed_values().numel(), (3 * 4 + 4) + (4 * 2 + 2));
  EXPECT_EQ(g->node_layer(1).get(), g->node_layer(0).get());
  Tensor x = random_tensor({5, 6}, rng);  // both inputs side by side
  ForwardContext ctx{true, 1, 0};
  Tensor y = g->forward(x, ctx);
  const Tensor G = random_tensor(y.shape(), rng);
  g->backward(G, nullptr);
  const Tensor grads = g->packed_grads().clone();
  auto loss = [&] { return dot(G, g->forward(x, ctx)); };
  expect_close(grads, numeric_gradient(g->packed_values(), loss), "packed gradients of a shared layer");
  EXPECT_THROW(g->layer_readers(), std::invalid_argument);  // model parallelism needs one call per layer
  auto copy = g->replicate(Device{});
  Tensor a = g->forward(x, ForwardContext{}).clone(), b = copy->forward(x, ForwardContext{}).clone();
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes()));
}

TEST(LayerGraphSharing, LaterCallsTakeTheFirstCallsShapes) {
  auto g = std::make_unique<LayerGraph>(std::vector<Shape>{{3}, {5}});
  auto shared = dense("shared", 4);
  const int ea = g->add_node(shared, {0});
  const int eb = g->add_node(shared, {1});
  g->set_outputs({g->add_node(std::make_shared<Add>("sum"), {ea, eb})});
  try {
    g->build(1);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"shared\""), std::string::npos) << e.what();
  }
}

TEST(LayerGraphFreezing, AFrozenLayerLeavesThePackedWeightsAndKeepsItsOwn) {
  std::mt19937_64 rng(8);
  auto g = siamese_graph();
  g->build(19, DType::Float64);
  const std::int64_t all = g->packed_values().numel();
  Tensor x = random_tensor({4, 6}, rng);
  const Tensor before = g->forward(x, ForwardContext{}).clone();
  g->layers()[0]->set_trainable(false);
  g->repack_parameters();
  EXPECT_EQ(g->packed_values().numel(), all - (3 * 4 + 4));  // only head's weights train
  const Tensor after = g->forward(x, ForwardContext{}).clone();
  EXPECT_EQ(0, std::memcmp(before.raw(), after.raw(), before.nbytes()));  // the values moved, unchanged
  Tensor y = g->forward(x, ForwardContext{true, 1, 0});
  g->backward(random_tensor(y.shape(), rng), nullptr);  // the frozen layer's gradients go elsewhere
  g->layers()[0]->set_trainable(true);
  g->repack_parameters();
  EXPECT_EQ(g->packed_values().numel(), all);
}

TEST(LayerGraph, ReplicateCopiesWeightsAndConnections) {
  std::mt19937_64 rng(6);
  auto g = residual_graph();
  g->build(13);
  auto copy = g->replicate(Device{});
  ASSERT_EQ(0, std::memcmp(g->packed_values().raw(), copy->packed_values().raw(), g->packed_values().nbytes()));
  EXPECT_FALSE(g->packed_values().same_storage(copy->packed_values()));
  Tensor x = random_tensor({3, 3}, rng, -1, 1, DType::Float32);
  Tensor a = g->forward(x, ForwardContext{}).clone(), b = copy->forward(x, ForwardContext{}).clone();
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes()));
}

// input -> d0 -> d1 -> add(d0, d1) -> head: a residual block between two cut points.
std::unique_ptr<LayerGraph> block_graph() {
  auto g = std::make_unique<LayerGraph>(std::vector<Shape>{{3}});
  const int d0 = g->add_node(dense("d0", 4, "relu"), {0});
  const int d1 = g->add_node(dense("d1", 4), {d0});
  const int sum = g->add_node(std::make_shared<Add>("add"), {d0, d1});
  g->set_outputs({g->add_node(dense("head", 2), {sum})});
  return g;
}

TEST(LayerGraph, ReadersAndCutPointsFollowTheConnections) {
  auto g = block_graph();
  g->build(3);
  const int out = Network::kOutput;
  EXPECT_EQ(g->layer_readers(), (std::vector<std::vector<int>>{{1, 2}, {2}, {3}, {out}}));
  // Inside the block (before d1: d0 and d1 both reach add) is no cut.
  EXPECT_EQ(g->cut_points(), (std::vector<int>{1, 3}));

  // An input read again later leaves no cut; a value returned besides the last crosses every
  // position after it (c and e meet at 2).
  LayerGraph skip(std::vector<Shape>{{3}});
  const int a = skip.add_node(dense("a", 3), {0});
  const int b = skip.add_node(dense("b", 3), {a});
  skip.set_outputs({skip.add_node(std::make_shared<Add>("add"), {0, b})});
  skip.build(1);
  EXPECT_TRUE(skip.cut_points().empty());
  LayerGraph two(std::vector<Shape>{{3}});
  const int c = two.add_node(dense("c", 3), {0});
  const int e = two.add_node(dense("e", 3), {c});
  two.set_outputs({c, two.add_node(dense("f", 2), {e})});
  two.build(1);
  EXPECT_EQ(two.cut_points(), (std::vector<int>{1}));

  LayerStack stack;
  for (int i = 0; i < 3; ++i) stack.add(dense("s" + std::to_string(i), 2));
  stack.build({2}, 1);
  EXPECT_EQ(stack.layer_readers(), (std::vector<std::vector<int>>{{1}, {2}, {out}}));
  EXPECT_EQ(stack.cut_points(), (std::vector<int>{1, 2}));
}

TEST(LayerGraph, WithLayersKeepsTheConnections) {
  std::mt19937_64 rng(8);
  auto g = block_graph();
  g->build(5);
  std::vector<std::shared_ptr<Layer>> clones;
  for (const auto& layer : g->layers()) clones.push_back(layer->clone());
  auto copy = g->with_layers(clones);
  ASSERT_EQ(copy->layers().size(), g->layers().size());
  EXPECT_EQ(copy->layer_readers(), g->layer_readers());
  copy->packed_values().copy_from(g->packed_values());
  Tensor x = random_tensor({4, 3}, rng, -1, 1, DType::Float32);
  Tensor a = g->forward(x, ForwardContext{}).clone(), b = copy->forward(x, ForwardContext{}).clone();
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes()));
  EXPECT_THROW(g->with_layers({}), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
