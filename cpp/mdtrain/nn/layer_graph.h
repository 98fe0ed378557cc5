#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/packed_network.h"

namespace mdtrain {

// Layers connected as a directed acyclic graph (the body of a Keras Functional model): the second
// Network strategies train, next to LayerStack. Values are numbered: 0 .. inputs-1 are the graph's
// inputs, and node i (a layer applied to earlier values) produces value inputs + i. Nodes are kept
// in topological order, parameters are packed in that order and backward runs it in reverse, so the
// first final gradient element only moves down (Network's contract); the gradient of a value that
// several nodes (or an output) read is the sum of their contributions. A chain of single-input
// layers packs, seeds and computes exactly as a LayerStack of the same layers.
//
// Several inputs (or outputs) travel packed at the Network boundary: x is (batch, sum of the
// inputs' sizes), each input's elements flattened one after another, and so is the output.
class LayerGraph final : public PackedNetwork {
 public:
  // A layer called at several places (a siamese encoder, a model used twice) has one node per
  // call. Its first call's node runs the layer itself; each later one runs a clone whose weights
  // are views of the layer's (the optimizer and get_weights see them once), whose gradients go to
  // buffers of its own and are added to the layer's when its first call's backward is done (the
  // calls' contributions, summed as Keras sums them). Model, pipeline and tensor parallelism
  // split graphs without shared layers only.
  struct Node {
    std::shared_ptr<Layer> layer;  // what runs: a MergeLayer when it reads several values
    std::vector<int> inputs;       // value numbers, all below this node's own
    int shares = -1;               // a later call of a layer: the node of its first call
    std::size_t layer_index = 0;   // the layer's position in layers()
  };

  // A graph with these inputs (shapes without the batch axis); nodes and outputs follow.
  explicit LayerGraph(std::vector<Shape> input_shapes);
  LayerGraph(const LayerGraph&) = delete;
  LayerGraph& operator=(const LayerGraph&) = delete;

  // Appends a node; returns its value number. Throws std::invalid_argument naming the layer when it
  // reads a value not yet defined or a single-input layer gets several values. A layer already in
  // the graph is called again (see Node).
  int add_node(std::shared_ptr<Layer> layer, std::vector<int> inputs);
  // The values the graph returns; every node must contribute to one of them.
  void set_outputs(std::vector<int> outputs);
  // Builds every node's layer on its inputs' shapes (node i seeded from (seed, i)) and packs.
  // Throws std::invalid_argument naming the layer and the shapes when they do not fit.
  void build(std::uint64_t seed, DType dtype = DType::Float32);

  int num_inputs() const { return static_cast<int>(input_shapes_.size()); }
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  // The layer node i calls as the model holds it (for a later call of a shared layer, not the
  // clone that runs it).
  const std::shared_ptr<Layer>& node_layer(std::size_t i) const;
  bool has_shared_layers() const;
  const std::vector<int>& outputs() const { return outputs_; }
  // The shape of a value (batch axis excluded); nodes' shapes are known once built.
  Shape value_shape(int value) const;
  std::vector<Shape> output_shapes() const;

  bool built() const override { return built_; }
  // The packed shapes at the boundary: the one input's (output's) shape, or (total size,).
  const Shape& input_shape() const override { return packed_input_shape_; }
  Shape output_shape() const override;

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  void backward(const Tensor& dy, const GradientsFinal& on_final) override;
  void backward(const Tensor& dy) { backward(dy, {}); }
  // Logits exist when there is one output and it is the last node's (always so for one output).
  Activation output_activation() const override;
  Tensor logits() const override;
  void backward_from_logits(const Tensor& dlogits, const GradientsFinal& on_final) override;
  void step_without_rows(const ForwardContext& ctx, const GradientsFinal& on_final) override;
  void forward_without_rows(const ForwardContext& ctx) override;
  void backward_without_rows(const GradientsFinal& on_final) override;

  // Keras's masks (nn/sequence_mask.h) travel along the edges as in LayerStack; a merge layer's
  // output carries (Keras 3's compute_mask) for Add the OR of its inputs' masks when every input
  // has one (else none), for Concatenate on the last axis the OR of its inputs' masks with an
  // unmasked input counting as all ones, and on the time axis the masks joined in time. Multiply
  // of masked inputs throws (Keras's multiplies masked steps as 1). The output's mask is known
  // for a model with one output (several outputs: none).
  bool output_masked() const override;
  Tensor output_mask() const override;

  // A deep copy (layers, weights, connections) with its packed parameters on `device`.
  std::unique_ptr<LayerGraph> clone_to(const Device& device) const;
  std::unique_ptr<Network> replicate(const Device& device) const override { return clone_to(device); }

  // Node i's readers: the nodes that take its value as an input, then kOutput if the graph returns it.
  std::vector<std::vector<int>> layer_readers() const override;
  // Node i's inputs: nodes' positions, or kNetworkInput - k for input k.
  std::vector<std::vector<int>> layer_inputs() const override;
  // The positions p where only node p - 1's value crosses from nodes [0, p) to [p, n).
  std::vector<int> cut_points() const override;
  // A graph of the same inputs, connections and outputs over `layers` (one per node), built.
  std::unique_ptr<Network> with_layers(std::vector<std::shared_ptr<Layer>> layers) const override;

 private:
  void check_built() const;
  // Packs the layers' weights, then points each later call's clone at its layer's weights.
  void pack_parameters() override;
  // Adds the gradients of the later calls of node i's layer to its own (node i: a first call).
  void add_shared_gradients(std::size_t i);
  // Throws std::invalid_argument when a layer is shared: what splits a graph by its nodes
  // (`what`) needs one layer per node.
  void require_unshared(const char* what) const;
  // Backward from the gradient of the output value, or (dlogits) of the last node's logits.
  void run_backward(const Tensor* dy, const Tensor* dlogits, const GradientsFinal& on_final);
  // Adds `g` to the gradient of `value` (dropped for the graph's inputs).
  void accumulate(int value, const Tensor& g);
  bool reads_only_inputs(const Node& node) const;
  // The mask a merge node's output carries given its inputs' (see output_masked).
  Tensor merged_mask(const Node& node, const std::vector<Tensor>& inputs) const;

  std::vector<Shape> input_shapes_;
  std::vector<Node> nodes_;
  std::vector<int> outputs_;
  std::vector<int> readers_;  // per value: how many node inputs and outputs read it
  bool built_ = false;
  Shape packed_input_shape_;
  std::vector<Tensor> values_;        // per value, the last forward's
  std::vector<Tensor> masks_;         // per value, the mask it carries (empty: none)
  std::vector<Tensor> grads_;         // per value, during backward
  std::vector<Tensor> accumulators_;  // per value read more than once: the summed gradient
  std::vector<Tensor> input_buffers_, output_buffer_;
};

}  // namespace mdtrain
