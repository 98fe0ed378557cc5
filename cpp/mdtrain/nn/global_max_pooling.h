#pragma once
#include <memory>
#include <string>

#include "mdtrain/nn/layer.h"

namespace mdtrain {

// keras.layers.GlobalMaxPooling1D and GlobalMaxPooling2D on channels_last inputs: (batch, steps,
// channels) or (batch, h, w, channels) → (batch, channels), or with keepdims (batch, 1, channels)
// / (batch, 1, 1, channels): the maximum over each sequence or image per channel. A sequence
// pools as the image (batch, 1, steps, channels). Forward remembers each maximum's position
// (ops::global_max_pool2d), backward routes dy there. Ties: the first of equal maxima takes the
// whole gradient (TF splits it evenly between them; the value is the same). NaN: the first NaN
// wins, so the output is NaN as TF's, and its gradient goes to that NaN. Like Keras's, these
// layers read no mask (a mask reaching them ends there).
class GlobalMaxPooling : public Layer {
 public:
  Shape compute_output_shape(const Shape& input_shape) const override;
  bool supports_unknown_dims() const override { return true; }
  bool has_cuda_kernels() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&y_, &argmax_, &dx_}); }
  Json config() const override;
  bool keepdims() const { return keepdims_; }

 protected:
  // `area` prefixes messages ("global_max_pooling1d"); it must outlive the layer (a string literal).
  GlobalMaxPooling(std::string name, bool keepdims, std::string data_format, int spatial_rank, const char* area);
  template <class L>
  std::unique_ptr<Layer> clone_as() const {
    auto copy = std::make_unique<L>(name_, keepdims_, data_format_);
    copy->copy_build_state(*this);
    return copy;
  }

  bool keepdims_;
  std::string data_format_;
  int spatial_rank_;
  const char* area_;
  Tensor y_, argmax_, dx_;  // argmax_: Int32 (batch, channels), the winning pixel of each
  Shape last_input_shape_;  // of the last forward (its time axis may be any length)
};

class GlobalMaxPooling1D : public GlobalMaxPooling {
 public:
  GlobalMaxPooling1D(std::string name, bool keepdims = false, std::string data_format = "channels_last")
      : GlobalMaxPooling(std::move(name), keepdims, std::move(data_format), 1, "global_max_pooling1d") {}
  std::string class_name() const override { return "GlobalMaxPooling1D"; }
  std::unique_ptr<Layer> clone() const override { return clone_as<GlobalMaxPooling1D>(); }
  // The layer of a Keras config (name, keepdims, data_format; missing fields take Keras's defaults).
  static std::unique_ptr<Layer> from_config(const Json& config);
};

class GlobalMaxPooling2D : public GlobalMaxPooling {
 public:
  GlobalMaxPooling2D(std::string name, bool keepdims = false, std::string data_format = "channels_last")
      : GlobalMaxPooling(std::move(name), keepdims, std::move(data_format), 2, "global_max_pooling2d") {}
  std::string class_name() const override { return "GlobalMaxPooling2D"; }
  std::unique_ptr<Layer> clone() const override { return clone_as<GlobalMaxPooling2D>(); }
  // The layer of a Keras config (name, keepdims, data_format; missing fields take Keras's defaults).
  static std::unique_ptr<Layer> from_config(const Json& config);
};

}  // namespace mdtrain
