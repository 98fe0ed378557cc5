#pragma once
#include <memory>
#include <string>

#include "mdtrain/nn/layer.h"

namespace mdtrain {

// keras.layers.GlobalAveragePooling2D on channels_last images: (batch, h, w, c) → (batch, c), or
// (batch, 1, 1, c) with keepdims, the mean over each image.
class GlobalAveragePooling2D : public Layer {
 public:
  GlobalAveragePooling2D(std::string name, bool keepdims = false, std::string data_format = "channels_last");
  std::string class_name() const override { return "GlobalAveragePooling2D"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&y_, &dx_}); }
  Json config() const override;
  // The layer of a Keras config: its "name" and fields; missing fields take Keras's defaults and
  // unknown ones are ignored. The one way layers are made from Python and from model files.
  static std::unique_ptr<Layer> from_config(const Json& config);
  bool keepdims() const { return keepdims_; }

 private:
  bool keepdims_;
  std::string data_format_;
  Tensor y_, dx_;
  std::int64_t last_batch_ = 0;
};

}  // namespace mdtrain
