#pragma once
#include <memory>
#include <string>

#include "mdtrain/nn/layer.h"

namespace mdtrain {

// keras.layers.Reshape: (batch, *input_shape) → (batch, *target_shape), one entry of which may
// be -1 (inferred). A view, no copy. Sizes that do not match are an error at build, as in Keras.
class Reshape : public Layer {
 public:
  Reshape(std::string name, Shape target_shape);
  std::string class_name() const override { return "Reshape"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  Json config() const override;
  // The layer of a Keras config: its "name" and fields; missing fields take Keras's defaults and
  // unknown ones are ignored. The one way layers are made from Python and from model files.
  static std::unique_ptr<Layer> from_config(const Json& config);
  const Shape& target_shape() const { return target_shape_; }

 private:
  Shape target_shape_;  // as given, -1 included
  Shape last_input_shape_;
};

}  // namespace mdtrain
