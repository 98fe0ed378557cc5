#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/layer_axes.h"

namespace mdtrain {

// keras.layers.Softmax(axis=-1): softmax over one axis or a list of axes (any, adjacent or not,
// but never the batch axis) by ops::softmax_over_axes. Over the last axis alone it is
// Activation("softmax"): the same bits, and a crossentropy after it is computed from its logits,
// as Keras computes it. Keras's call-time mask is refused in Python (keras/layers/mask_propagation).
class SoftmaxLayer : public Layer {
 public:
  SoftmaxLayer(std::string name, LayerAxes axes);
  std::string class_name() const override { return "Softmax"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  Activation output_activation() const override;
  Tensor logits() const override { return x_; }
  Tensor backward_from_logits(const Tensor& dlogits, bool need_input_grad) override {
    return need_input_grad ? dlogits : Tensor();
  }
  std::unique_ptr<Layer> clone() const override;
  // A split activation (split along its last axis) passes through when the softmax does not run
  // along that axis.
  TensorParallelForm tensor_parallel_form() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&y_, &dx_}); }
  Json config() const override;
  static std::unique_ptr<Layer> from_config(const Json& config);

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  bool over_last_axis_only() const;
  LayerAxes given_;
  std::vector<int> axes_;  // resolved at build
  Tensor x_, y_, dx_;
};

}  // namespace mdtrain
