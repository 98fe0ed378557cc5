#pragma once
// GraphSegment: the layers of a network between two of its cut points (Network::cut_points), run
// as one Layer: one tensor in (the output of the layer before the first cut, or the network's
// input), one tensor out (the last layer's output). A strategy that cuts a network into stages
// (a pipeline) runs a stage as a list of layers one after another; a residual block, which no cut
// point divides, is one GraphSegment in that list, so a stage of a layer graph is a stack of
// layers and segments, and a stage of a LayerStack the stack's own layers.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/network.h"
#include "mdtrain/nn/packed_parameters.h"

namespace mdtrain {

// Values are numbered as in LayerGraph, with one input: value 0 is the segment's input and node i
// (a layer applied to earlier values) produces value i + 1; the last node's value is the output and
// every other value is read inside the segment. Forward runs the nodes in order; backward runs
// them in reverse and sums the gradient of a value several nodes read (the first contribution
// copied, the later ones added in that reverse order, as LayerGraph sums them), so a segment
// computes what the same nodes compute inside their LayerGraph. The parameters are the nodes'
// layers' in node order (the network's packed order for those layers).
//
// Keras's masks do not travel through a segment (nor between the layers of a pipeline stage).
class GraphSegment final : public Layer {
 public:
  struct Node {
    std::shared_ptr<Layer> layer;  // a MergeLayer when it reads several values
    std::vector<int> inputs;       // value numbers, all below this node's own (i + 1)
  };

  // Throws std::invalid_argument naming the layer when a node reads a value not defined before it,
  // a single-input layer gets several values, or a value other than the output is read by no node.
  // When every layer is built (the network's own layers, or clones of them), so is the segment,
  // for the input shape its first readers were built for.
  GraphSegment(std::string name, std::vector<Node> nodes);

  std::string class_name() const override { return "GraphSegment"; }
  const std::vector<Node>& nodes() const { return nodes_; }
  // The nodes' layers, in node order.
  const LayerList& layers() const { return layers_; }

  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;

  // When every layer with trainable weights does; the segment's flag reaches its layers at each
  // backward (each layer runs one backward per segment backward).
  bool supports_gradient_accumulation() const override;
  void forward_without_rows(const ForwardContext& ctx) override;
  void backward_without_rows(bool need_input_grad) override;
  void apply_deferred_statistics(CrossReplicaContext* replicas) override;
  // `to` is a clone of this segment: each layer's records move to its counterpart.
  void move_deferred_statistics_to(Layer& to) override;

  // The last node's.
  Activation output_activation() const override;
  Tensor logits() const override;
  Tensor backward_from_logits(const Tensor& dlogits, bool need_input_grad) override;

  std::vector<Parameter*> parameters() override { return parameters_of(layers_); }
  double regularization_loss() const override { return regularization_loss_of(layers_); }
  void add_regularization_gradients() override { add_regularization_gradients_of(layers_); }

  std::unique_ptr<Layer> clone() const override;
  // The layers' held state and the segment's gradient sums.
  std::int64_t held_activation_bytes() const override;
  bool has_cuda_kernels() const override;

 protected:
  // Builds each node's layer on its inputs' shapes (the i-th layer with weights seeded from
  // (seed, i)).
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Tensor run_backward(const Tensor* dy, const Tensor* dlogits, bool need_input_grad);
  // Adds `g` to the gradient of `value` (dropped for the input unless its gradient is needed).
  void accumulate(int value, const Tensor& g, bool need_input_grad);
  // Whether node i's backward must give dL/d(its inputs).
  bool node_needs_input_grad(std::size_t i, bool need_input_grad) const;

  std::vector<Node> nodes_;
  LayerList layers_;
  std::vector<int> readers_;          // per value: how many node inputs read it (the output: 1)
  std::vector<Tensor> values_;        // per value, the last forward's
  std::vector<Tensor> grads_;         // per value, during backward
  std::vector<Tensor> accumulators_;  // per value read more than once: the summed gradient
};

// Positions [first, last) of `network` as layers to run one after another, each taking the
// previous one's output: every stretch between consecutive cut points is its one layer, or a
// GraphSegment of its layers when it holds several (a residual block). first and last must be 0,
// a cut point or the layer count. The layers are the network's own, or with `clone` copies of
// them (built, weights included). Throws std::invalid_argument for a network with several inputs
// or outputs, or a bound that is not a cut point (cut_error's message).
LayerList segment_layers(const Network& network, int first, int last, bool clone);

// `units` (segment_layers' result) with every GraphSegment replaced by its layers: one layer per
// position of the network they were cut from.
LayerList inner_layers(const LayerList& units);

// Whether the network can be cut before the layer at `position` (0 < position < layers().size()).
bool is_cut_point(const Network& network, int position);
// Why `network` cannot be cut before layer `position` (not a cut point): the layer there and a
// value that crosses the cut besides its input, e.g. 'layer "block0_conv2" is inside a block: the
// output of "stem" is read by "block0_add" after it'.
std::string cut_error(const Network& network, int position);

}  // namespace mdtrain
