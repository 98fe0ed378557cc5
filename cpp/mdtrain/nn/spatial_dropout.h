#pragma once
#include "mdtrain/nn/layer.h"

namespace mdtrain {

// keras.layers.SpatialDropout1D(rate) on (batch, steps, channels) and SpatialDropout2D(rate,
// data_format="channels_last") on (batch, rows, cols, channels): in training, drops whole channels
// of each example (probability `rate`, the kept ones scaled by 1 / (1 - rate)); identity in
// inference. One inverted-dropout multiplier per (example, channel), drawn as ops::dropout draws
// the element at (global row) * channels + channel of a (batch, channels) tensor (ops/noise.h),
// so the split over replicas does not change it. channels_first is refused. Keras's config of
// these layers has no "trainable" (their constructors do not take it): neither has this one's.
class SpatialDropout : public Layer {
 public:
  SpatialDropout(std::string name, int spatial_rank, double rate, std::uint64_t seed);
  std::string class_name() const override { return spatial_rank_ == 1 ? "SpatialDropout1D" : "SpatialDropout2D"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&mask_, &y_, &dx_}); }
  // {"name", "dtype", "rate", "seed"} and, for 2-D, "data_format": Keras's fields.
  Json config() const override;
  static std::unique_ptr<Layer> from_config_1d(const Json& config);
  static std::unique_ptr<Layer> from_config_2d(const Json& config);

 private:
  int spatial_rank_;
  double rate_;
  std::uint64_t seed_;
  bool applied_ = false;
  Tensor mask_;  // (batch, channels)
  Tensor y_, dx_;
};

}  // namespace mdtrain
