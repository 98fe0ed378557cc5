#pragma once
#include "mdtrain/nn/layer.h"
#include "mdtrain/ops/activation.h"

namespace mdtrain {

// keras.layers.Activation: applies an activation element-wise (softmax along the last axis).
class ActivationLayer : public Layer {
 public:
  ActivationLayer(std::string name, const std::string& activation);
  std::string class_name() const override { return "Activation"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  Activation output_activation() const override { return activation_; }
  Tensor logits() const override { return x_; }
  Tensor backward_from_logits(const Tensor& dlogits, bool need_input_grad) override {
    return need_input_grad ? dlogits : Tensor();
  }
  std::unique_ptr<Layer> clone() const override;
  // Softmax needs every feature; any other activation passes a split activation through.
  TensorParallelForm tensor_parallel_form() const override {
    return activation_ == Activation::Softmax ? TensorParallelForm::None : TensorParallelForm::Elementwise;
  }
  std::int64_t held_activation_bytes() const override { return bytes_of({&y_, &dx_}); }
  Json config() const override;
  // The layer of a Keras config: its "name" and fields; missing fields take Keras's defaults and
  // unknown ones are ignored. The one way layers are made from Python and from model files.
  static std::unique_ptr<Layer> from_config(const Json& config);

 private:
  Activation activation_;
  Tensor x_, y_, dx_;
};

}  // namespace mdtrain
