#pragma once
// keras.layers.Dropout on an activation whose last dimension is split over shards (between a
// column-parallel and a row-parallel layer): this shard holds features [offset, offset + piece)
// of `whole_features`. Each element's mask is keyed by its position in the unsharded activation
// of the global batch, so the shards together drop exactly what the unsharded layer drops.
#include <memory>
#include <string>

#include "mdtrain/nn/layer.h"

namespace mdtrain {

class SplitDropout : public Layer {
 public:
  SplitDropout(std::string name, double rate, std::uint64_t seed, std::int64_t whole_features, std::int64_t offset);

  std::string class_name() const override { return "Dropout"; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  // One ops::dropout per run of this shard's features (a launch per row on a GPU: correct, not fast).
  bool has_cuda_kernels() const override { return true; }
  Json config() const override;

 private:
  double rate_;
  std::uint64_t seed_;
  std::int64_t whole_features_, offset_;
  bool applied_ = false;
  Tensor mask_, y_, dx_;
};

}  // namespace mdtrain
