#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/packed_network.h"

namespace mdtrain {

// Layers run one after another (the body of a Keras Sequential): the Network strategies train.
// Once built, all trainable
// parameter values live in one contiguous buffer and all their gradients in another (each
// Parameter's tensors are views into them), so a gradient all-reduce or an optimizer sweep is one
// pass over memory, and a range of it can be handed to one replica (sharded updates).
// Non-trainable weights (BatchNormalization's moving statistics) have no gradient and are no
// optimizer's business: their values live in a third buffer, outside those ranges, updated by
// their layers in training forwards.
class LayerStack final : public PackedNetwork {
 public:
  LayerStack() = default;
  LayerStack(const LayerStack&) = delete;
  LayerStack& operator=(const LayerStack&) = delete;

  // Adding to a built stack builds the new layer on the current output shape.
  void add(std::shared_ptr<Layer> layer);
  // Removes the last layer and returns it (Keras's Sequential.pop); the rest keep their weights.
  // Popping the only layer leaves an empty, unbuilt stack. std::invalid_argument when empty.
  std::shared_ptr<Layer> pop();

  // Builds every layer for inputs shaped (batch, *input_shape); layer i is seeded from (seed, i).
  void build(const Shape& input_shape, std::uint64_t seed, DType dtype = DType::Float32);
  bool built() const override { return built_; }
  const Shape& input_shape() const override { return input_shape_; }
  Shape output_shape() const override;

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  // GradientsFinal (Network): layers are packed in order and backward runs last to first, so the
  // first final element only moves down; the strategy starts the all-reduce of the gradient
  // buckets behind it while backward goes on.
  // Backpropagates dL/d(output) of the last forward into every trainable parameter's .grad.
  void backward(const Tensor& dy, const GradientsFinal& on_final) override;
  void backward(const Tensor& dy) { backward(dy, {}); }
  // A training step's forward and backward for a replica whose slice is empty: every layer's
  // forward_without_rows, then backward_without_rows in reverse, so the replica joins the
  // collectives its layers run (see Layer::forward_without_rows). Gradients are not touched, but
  // on_final is called at the same points as backward() calls it, so the collectives the caller
  // runs from it interleave with the layers' in the same order on every replica.
  void step_without_rows(const ForwardContext& ctx, const GradientsFinal& on_final) override;
  void forward_without_rows(const ForwardContext& ctx) override;
  void backward_without_rows(const GradientsFinal& on_final) override;

  // Whether the last layer's output carries a mask, and the mask of the last forward's output.
  bool output_masked() const override;
  Tensor output_mask() const override { return output_mask_; }

  // The last layer's final activation, its logits, and backward from d(loss)/d(logits) (see
  // Layer::output_activation).
  Activation output_activation() const override;
  Tensor logits() const override;
  void backward_from_logits(const Tensor& dlogits, const GradientsFinal& on_final) override;
  void backward_from_logits(const Tensor& dlogits) { backward_from_logits(dlogits, {}); }

  // A deep copy (layers, weights), built and packed on the same device as this stack.
  std::unique_ptr<LayerStack> clone() const;
  // The same deep copy with its packed parameters (values, gradients, non-trainable weights) on
  // `device`: a replica's copy of the model. Layers build and initialize on the host; this is where
  // their weights move. Throws like check_device_support before allocating anything.
  std::unique_ptr<LayerStack> clone_to(const Device& device) const;
  std::unique_ptr<Network> replicate(const Device& device) const override { return clone_to(device); }

  // Layer i is read by layer i + 1; the last by the output.
  std::vector<std::vector<int>> layer_readers() const override;
  // Layer i reads layer i - 1; the first the input.
  std::vector<std::vector<int>> layer_inputs() const override;
  // Every position: 1 .. n - 1.
  std::vector<int> cut_points() const override;
  // A stack of `layers` built for this stack's input shape and dtype.
  std::unique_ptr<Network> with_layers(std::vector<std::shared_ptr<Layer>> layers) const override;

 private:
  bool built_ = false;
  std::uint64_t seed_ = 0;
  Shape input_shape_;
  Tensor output_mask_;  // what the last forward's output carries (empty: none)
};

}  // namespace mdtrain
