// GraphSegment and segment_layers: a layer graph cut at its cut points into layers and residual
// blocks that run one after another compute the graph's forward and its parameter gradients bit
// for bit; a segment sums its micro-batches' gradients when asked; the inputs of each layer
// (layer_inputs) follow the connections; a cut inside a block or a graph with several outputs is
// refused naming the layer.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "mdtrain/nn/concatenate.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/elementwise_merge.h"
#include "mdtrain/nn/graph_segment.h"
#include "mdtrain/nn/layer_graph.h"
#include "mdtrain/nn/layer_stack.h"

namespace mdtrain {
namespace {

using testing::random_tensor;

std::shared_ptr<Dense> dense(const std::string& name, std::int64_t units, const std::string& activation = "linear") {
  Dense::Options o;
  o.units = units;
  o.activation = activation;
  return std::make_shared<Dense>(name, o);
}

// input -> stem -> [d1 -> Concatenate(d1, stem) -> d2 -> Add(d2, stem)] -> head: a block whose
// input three layers read (one merge in an order that matters), between the cut points 1 and 5.
std::unique_ptr<LayerGraph> block_graph() {
  auto g = std::make_unique<LayerGraph>(std::vector<Shape>{{3}});
  const int stem = g->add_node(dense("stem", 4, "relu"), {0});
  const int d1 = g->add_node(dense("d1", 3, "tanh"), {stem});
  const int cat = g->add_node(std::make_shared<Concatenate>("cat"), {d1, stem});
  const int d2 = g->add_node(dense("d2", 4, "relu"), {cat});
  const int sum = g->add_node(std::make_shared<Add>("add"), {d2, stem});
  g->set_outputs({g->add_node(dense("head", 2), {sum})});
  g->build(7);
  return g;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// A stack of the network's units (copies), its weights the network's.
std::unique_ptr<LayerStack> stack_of_units(const Network& net) {
  auto stack = std::make_unique<LayerStack>();
  for (auto& unit : segment_layers(net, 0, static_cast<int>(net.layers().size()), true)) stack->add(unit);
  stack->build(net.input_shape(), 0, net.dtype());
  return stack;
}

TEST(GraphSegment, LayerInputsFollowTheConnections) {
  auto g = block_graph();
  const int in = Network::kNetworkInput;
  EXPECT_EQ(g->layer_inputs(), (std::vector<std::vector<int>>{{in}, {0}, {1, 0}, {2}, {3, 0}, {4}}));
  EXPECT_EQ(g->cut_points(), (std::vector<int>{1, 5}));
  LayerStack stack;
  for (int i = 0; i < 3; ++i) stack.add(dense("s" + std::to_string(i), 2));
  stack.build({2}, 1);
  EXPECT_EQ(stack.layer_inputs(), (std::vector<std::vector<int>>{{in}, {0}, {1}}));
}

TEST(GraphSegment, UnitsAreTheLayersAndOneSegmentPerBlock) {
  auto g = block_graph();
  const LayerList units = segment_layers(*g, 0, 6, false);
  ASSERT_EQ(units.size(), 3u);
  EXPECT_EQ(units[0], g->layers()[0]);  // the network's own layers
  EXPECT_EQ(units[2], g->layers()[5]);
  const auto* block = dynamic_cast<const GraphSegment*>(units[1].get());
  ASSERT_NE(block, nullptr);
  ASSERT_EQ(block->nodes().size(), 4u);
  EXPECT_EQ(block->nodes()[0].inputs, (std::vector<int>{0}));
  EXPECT_EQ(block->nodes()[1].inputs, (std::vector<int>{1, 0}));  // Concatenate(d1, stem)
  EXPECT_EQ(block->nodes()[2].inputs, (std::vector<int>{2}));
  EXPECT_EQ(block->nodes()[3].inputs, (std::vector<int>{3, 0}));
  EXPECT_TRUE(block->built());  // around built layers
  EXPECT_EQ(block->input_shape(), (Shape{4}));
  EXPECT_EQ(block->output_shape(), (Shape{4}));
  EXPECT_EQ(inner_layers(units), g->layers());
  // A range between two cut points; a stack's units are its layers.
  EXPECT_EQ(segment_layers(*g, 1, 5, true).size(), 1u);
  LayerStack stack;
  for (int i = 0; i < 3; ++i) stack.add(dense("s" + std::to_string(i), 2));
  stack.build({2}, 1);
  EXPECT_EQ(segment_layers(stack, 0, 3, false), stack.layers());
}

TEST(GraphSegment, AStackOfUnitsComputesTheGraphBitwise) {
  std::mt19937_64 rng(4);
  auto g = block_graph();
  auto stack = stack_of_units(*g);
  ASSERT_EQ(stack->trainable_count(), g->trainable_count());
  stack->packed_values().copy_from(g->packed_values());  // the same packed order
  const Tensor x = random_tensor({5, 3}, rng, -1, 1, DType::Float32);
  const Tensor dy = random_tensor({5, 2}, rng, -1, 1, DType::Float32);
  ForwardContext ctx;
  ctx.training = true;
  EXPECT_TRUE(bitwise_equal(g->forward(x, ctx).clone(), stack->forward(x, ctx).clone()));
  g->backward(dy, {});
  stack->backward(dy);
  EXPECT_TRUE(bitwise_equal(g->packed_grads(), stack->packed_grads()));
  // The block's input gradient is the sum over its three readers, as the graph sums the stem's.
  auto& block = *stack->layers()[1];
  const Tensor dblock = block.backward(stack->layers()[2]->backward(dy, true), true);
  EXPECT_EQ(dblock.shape(), (Shape{5, 4}));
  EXPECT_GT(block.held_activation_bytes(), 0);
}

TEST(GraphSegment, AccumulatesMicroBatchGradientsWhenAsked) {
  std::mt19937_64 rng(5);
  auto g = block_graph();
  auto block = segment_layers(*g, 1, 5, true).front();
  ASSERT_TRUE(block->supports_gradient_accumulation());
  const Tensor a = random_tensor({3, 4}, rng, -1, 1, DType::Float32),
               b = random_tensor({2, 4}, rng, -1, 1, DType::Float32);
  const Tensor da = random_tensor({3, 4}, rng, -1, 1, DType::Float32),
               db = random_tensor({2, 4}, rng, -1, 1, DType::Float32);
  ForwardContext ctx;
  std::vector<Tensor> sum;
  block->forward(a, ctx);
  block->backward(da, true);
  for (Parameter* p : block->parameters()) sum.push_back(p->grad.clone());
  block->forward(b, ctx);
  block->backward(db, true);
  for (std::size_t k = 0; k < sum.size(); ++k) {
    Tensor& s = sum[k];
    const Tensor& g2 = block->parameters()[k]->grad;
    for (std::int64_t i = 0; i < s.numel(); ++i) s.data<float>()[i] += g2.data<float>()[i];
  }
  block->set_accumulate_gradients(true);
  block->forward(a, ctx);
  block->set_accumulate_gradients(false);
  block->backward(da, true);  // overwrites
  block->set_accumulate_gradients(true);
  block->forward(b, ctx);
  block->backward(db, true);  // adds
  for (std::size_t k = 0; k < sum.size(); ++k) {
    const Tensor& got = block->parameters()[k]->grad;
    for (std::int64_t i = 0; i < got.numel(); ++i) EXPECT_NEAR(got.data<float>()[i], sum[k].data<float>()[i], 1e-6);
  }
}

TEST(GraphSegment, ACutInsideABlockIsRefusedNamingTheLayers) {
  auto g = block_graph();
  EXPECT_FALSE(is_cut_point(*g, 2));
  EXPECT_TRUE(is_cut_point(*g, 5));
  try {
    segment_layers(*g, 0, 2, true);
    FAIL() << "a cut before \"cat\" was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(R"(layer "cat" is inside a block)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(R"(the output of layer "stem" is read by layer "cat")"), std::string::npos)
        << e.what();
  }
  // Several outputs: no segments.
  LayerGraph two(std::vector<Shape>{{3}});
  const int c = two.add_node(dense("c", 3), {0});
  two.set_outputs({c, two.add_node(dense("f", 2), {c})});
  two.build(1);
  EXPECT_THROW(segment_layers(two, 0, 2, true), std::invalid_argument);
  // A segment must read its input and every value but its output.
  EXPECT_THROW(GraphSegment("s", {{dense("x", 2), {0}}, {dense("y", 2), {0}}}), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
