#pragma once
#include <cstdint>

#include "mdtrain/nn/network.h"
#include "mdtrain/nn/packed_parameters.h"

namespace mdtrain {

// The part of a Network that does not depend on how its layers are connected: the layers in
// packed order, their weights packed as Network promises (PackedParameters), the weight lists,
// penalties and device checks. LayerStack and LayerGraph add forward and backward.
class PackedNetwork : public Network {
 public:
  const LayerList& layers() const override { return layers_; }
  DType dtype() const override { return dtype_; }
  // Where the packed parameters live (the host unless a replica's copy placed them elsewhere).
  const Device& device() const override { return device_; }

  // Every weight in get_weights() order (layer by layer, each layer's Keras order).
  ParameterList parameters() override { return parameters_of(layers_); }
  // The trainable ones, in packed order (the optimizer's element order), and the others.
  ParameterList trainable_parameters() override { return trainable_parameters_of(layers_); }
  ParameterList non_trainable_parameters() override { return non_trainable_parameters_of(layers_); }
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
  void repack_parameters() override {
    if (built()) pack_parameters();
  }

  double regularization_loss() const override { return regularization_loss_of(layers_); }
  void add_regularization_gradients() override { add_regularization_gradients_of(layers_); }
  // Throws std::invalid_argument("[layers] Conv2D has no CUDA kernels yet; train it on CPU
  // devices") naming the first layer that cannot run on `device`. Any layer runs on a CPU device.
  void check_device_support(const Device& device) const override { check_layers_device_support(layers_, device); }

 protected:
  virtual void pack_parameters() { packed_.pack(layers_, dtype_, device_); }
  // Tells on_final (if any) that the gradients of layer i, and of all after it, are written.
  void layer_done(std::size_t i, const GradientsFinal& on_final) const {
    if (on_final) on_final(packed_.first_grad_element[i]);
  }

  LayerList layers_;
  DType dtype_ = DType::Float32;
  Device device_;
  PackedParameters packed_;
};

}  // namespace mdtrain
