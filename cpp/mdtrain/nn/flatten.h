#pragma once
#include "mdtrain/nn/layer.h"

namespace mdtrain {

// keras.layers.Flatten: (batch, d1, d2, ...) → (batch, d1*d2*...). A view, no copy.
class Flatten : public Layer {
 public:
  explicit Flatten(std::string name) : Layer(std::move(name)) {}
  std::string class_name() const override { return "Flatten"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override { return {numel(input_shape)}; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  // config() is Layer's: {"name", "trainable", "dtype"}.
  // The layer of a Keras config (its "name"; other fields are ignored).
  static std::unique_ptr<Layer> from_config(const Json& config);

 private:
  Shape last_input_shape_;
};

}  // namespace mdtrain
