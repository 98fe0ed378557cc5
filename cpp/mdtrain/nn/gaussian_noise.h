#pragma once
#include "mdtrain/nn/layer.h"

namespace mdtrain {

// keras.layers.GaussianNoise(stddev, seed=None): in training, adds zero-centred normal noise of
// standard deviation `stddev` (in [0, 1], as Keras checks); identity in inference. The noise of
// each element depends on (seed, step, its position in the global batch) alone (ops/noise.h), so
// it is the same whatever the replica count. The gradient passes through unchanged.
class GaussianNoise : public Layer {
 public:
  GaussianNoise(std::string name, double stddev, std::uint64_t seed);
  std::string class_name() const override { return "GaussianNoise"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&y_}); }
  Json config() const override;  // Layer's fields, "stddev" and "seed"
  static std::unique_ptr<Layer> from_config(const Json& config);

 private:
  double stddev_;
  std::uint64_t seed_;
  Tensor y_;
};

}  // namespace mdtrain
