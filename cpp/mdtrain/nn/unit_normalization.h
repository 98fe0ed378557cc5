#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/layer_axes.h"

namespace mdtrain {

// keras.layers.UnitNormalization(axis=-1): each slice along `axis` (an int or a list of axes, never
// the batch axis) scaled to unit L2 norm as Keras 3 computes it, x * min(1 / sqrt(sum x^2), 1e12)
// (ops::unit_normalize). No weights; the same in training and inference.
class UnitNormalization : public Layer {
 public:
  UnitNormalization(std::string name, LayerAxes axes);
  std::string class_name() const override { return "UnitNormalization"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  // Element-wise along the split (last) axis only when the norm does not run along it.
  TensorParallelForm tensor_parallel_form() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&y_, &dx_}); }
  Json config() const override;
  static std::unique_ptr<Layer> from_config(const Json& config);

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  LayerAxes given_;
  std::vector<int> axes_;  // resolved at build
  Tensor x_, y_, dx_;
};

}  // namespace mdtrain
