#pragma once
#include "mdtrain/nn/layer.h"

namespace mdtrain {

// keras.layers.GaussianDropout(rate, seed=None): in training, multiplies each element by a normal
// of mean 1 and standard deviation sqrt(rate / (1 - rate)); identity in inference. rate in
// [0, 1) (Keras accepts 1 and then divides by zero in training: refused here). The multipliers
// depend on (seed, step, the element's position in the global batch) alone (ops/noise.h); the
// gradient is dy times the same multipliers.
class GaussianDropout : public Layer {
 public:
  GaussianDropout(std::string name, double rate, std::uint64_t seed);
  std::string class_name() const override { return "GaussianDropout"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&multiplier_, &y_, &dx_}); }
  Json config() const override;  // Layer's fields, "rate" and "seed"
  static std::unique_ptr<Layer> from_config(const Json& config);

 private:
  double rate_;
  std::uint64_t seed_;
  bool applied_ = false;  // whether the last forward multiplied anything
  Tensor multiplier_, y_, dx_;
};

}  // namespace mdtrain
