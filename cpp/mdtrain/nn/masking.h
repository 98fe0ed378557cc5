#pragma once
#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/sequence_mask.h"

namespace mdtrain {

// keras.layers.Masking(mask_value): on (batch, timesteps, ...) a step is padding when every one of
// its values equals mask_value. The output is the input with padding steps zeroed (Keras's
// inputs * any(inputs != mask_value)), and it carries the mask (batch, timesteps) to the layers
// after it (nn/sequence_mask.h). CPU devices only.
class Masking : public Layer, public MaskedLayer {
 public:
  Masking(std::string name, double mask_value);
  std::string class_name() const override { return "Masking"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&mask_, &y_, &dx_}); }
  Json config() const override;
  static std::unique_ptr<Layer> from_config(const Json& config);
  Tensor output_mask() const override { return mask_; }
  bool output_masked(bool /*input_masked*/) const override { return true; }

 private:
  double mask_value_;
  Tensor mask_, y_, dx_;  // mask_: (batch, timesteps) of the last forward
};

}  // namespace mdtrain
