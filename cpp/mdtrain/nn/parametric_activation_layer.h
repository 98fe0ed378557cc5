#pragma once
#include <memory>
#include <string>

#include "mdtrain/nn/layer.h"
#include "mdtrain/ops/parametric_activation.h"

namespace mdtrain {

// keras.layers.ReLU(max_value=None, negative_slope=0.0, threshold=0.0), LeakyReLU(negative_slope=0.3)
// and ELU(alpha=1.0): one element-wise activation with arguments (ops/parametric_activation.h) under
// the class name of each. Keras's checks: ReLU's max_value >= 0 (or null), negative_slope and
// threshold >= 0; LeakyReLU's negative_slope >= 0. LeakyReLU is Keras's relu with only a
// negative_slope (Keras's relu takes the leaky_relu path then, and so does the math).
class ParametricActivationLayer : public Layer {
 public:
  enum class Class { ReLU, LeakyReLU, ELU };
  ParametricActivationLayer(std::string name, Class cls, ops::ParametricActivation activation);

  std::string class_name() const override;
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  // Element-wise: a split activation passes through between a column- and a row-parallel layer.
  TensorParallelForm tensor_parallel_form() const override { return TensorParallelForm::Elementwise; }
  std::int64_t held_activation_bytes() const override { return bytes_of({&y_, &dx_}); }
  Json config() const override;
  const ops::ParametricActivation& activation() const { return activation_; }

  // Keras's configs; missing fields take Keras's defaults, unknown ones are ignored.
  static std::unique_ptr<Layer> from_config_relu(const Json& config);
  static std::unique_ptr<Layer> from_config_leaky_relu(const Json& config);
  static std::unique_ptr<Layer> from_config_elu(const Json& config);

 private:
  Class class_;
  ops::ParametricActivation activation_;
  Tensor x_, y_, dx_;
};

}  // namespace mdtrain
