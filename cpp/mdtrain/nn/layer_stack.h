#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/network.h"
#include "mdtrain/nn/packed_parameters.h"

namespace mdtrain {

// Layers run one after another (the body of a Keras Sequential): the Network strategies train.
// Once built, all trainable
// parameter values live in one contiguous buffer and all their gradients in another (each
// Parameter's tensors are views into them), so a gradient all-reduce or an optimizer sweep is one
// pass over memory, and a range of it can be handed to one replica (sharded updates).
// Non-trainable weights (BatchNormalization's moving statistics) have no gradient and are no
// optimizer's business: their values live in a third buffer, outside those ranges, updated by
// their layers in training forwards.
class LayerStack final : public Network {
 public:
  LayerStack() = default;
  LayerStack(const LayerStack&) = delete;
  LayerStack& operator=(const LayerStack&) = delete;

  // Adding to a built stack builds the new layer on the current output shape.
  void add(std::shared_ptr<Layer> layer);
  const std::vector<std::shared_ptr<Layer>>& layers() const override { return layers_; }

  // Builds every layer for inputs shaped (batch, *input_shape); layer i is seeded from (seed, i).
  void build(const Shape& input_shape, std::uint64_t seed, DType dtype = DType::Float32);
  bool built() const override { return built_; }
  const Shape& input_shape() const override { return input_shape_; }
  Shape output_shape() const override;
  DType dtype() const override { return dtype_; }

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

  // The last layer's final activation, its logits, and backward from d(loss)/d(logits) (see
  // Layer::output_activation).
  Activation output_activation() const override;
  Tensor logits() const override;
  void backward_from_logits(const Tensor& dlogits, const GradientsFinal& on_final) override;
  void backward_from_logits(const Tensor& dlogits) { backward_from_logits(dlogits, {}); }

  // Every weight in get_weights() order (layer by layer, each layer's Keras order).
  ParameterList parameters() override;
  // The trainable ones, in packed order (the optimizer's element order), and the others.
  ParameterList trainable_parameters() override;
  ParameterList non_trainable_parameters() override;
  // Elements of all weights (Keras's count_params), of the trainable ones (the packed buffers).
  std::int64_t parameter_count() const { return packed_.values.numel() + packed_.non_trainable.numel(); }
  std::int64_t trainable_count() const override { return packed_.values.numel(); }
  Tensor& packed_values() override { return packed_.values; }
  Tensor& packed_grads() override { return packed_.grads; }
  // The non-trainable weights' values, packed in parameters() order.
  Tensor& non_trainable_values() override { return packed_.non_trainable; }
  // The same buffers followed by kPackedPadding zero elements (Network::kPackedPadding).
  Tensor& padded_values() override { return packed_.padded_values; }
  Tensor& padded_grads() override { return packed_.padded_grads; }

  double regularization_loss() const override;
  void add_regularization_gradients() override;

  // A deep copy (layers, weights), built and packed on the same device as this stack.
  std::unique_ptr<LayerStack> clone() const;
  // The same deep copy with its packed parameters (values, gradients, non-trainable weights) on
  // `device`: a replica's copy of the model. Layers build and initialize on the host; this is where
  // their weights move. Throws like check_device_support before allocating anything.
  std::unique_ptr<LayerStack> clone_to(const Device& device) const;
  std::unique_ptr<Network> replicate(const Device& device) const override { return clone_to(device); }
  // Where the packed parameters live (the host unless clone_to placed them elsewhere).
  const Device& device() const override { return device_; }
  // Throws std::invalid_argument("[layers] Conv2D has no CUDA kernels yet; train it on CPU
  // devices") naming the first layer that cannot run on `device`. Any layer runs on a CPU device.
  void check_device_support(const Device& device) const override;

 private:
  void pack_parameters() { packed_.pack(layers_, dtype_, device_); }
  // Tells on_final (if any) that layer i's gradients, and all after them, are written.
  void layer_done(std::size_t i, const GradientsFinal& on_final) const;

  std::vector<std::shared_ptr<Layer>> layers_;
  bool built_ = false;
  std::uint64_t seed_ = 0;
  Shape input_shape_;
  DType dtype_ = DType::Float32;
  Device device_;
  PackedParameters packed_;
};

}  // namespace mdtrain
