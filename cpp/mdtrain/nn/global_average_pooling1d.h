#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/sequence_mask.h"

namespace mdtrain {

// keras.layers.GlobalAveragePooling1D on channels_last sequences: (batch, steps, channels) →
// (batch, channels), or (batch, 1, channels) with keepdims, the mean over each sequence's steps.
// It reads a mask (Embedding(mask_zero=True) before it): masked steps are left out of the mean
// (ops/masked_pooling_math.h: a sequence with every step masked gives NaN, as in Keras); its
// output carries no mask. Unmasked it runs the 2-D global mean's kernels (CPU and CUDA) on the
// image (batch, 1, steps, channels); masked it runs on CPU devices only, as masks do.
class GlobalAveragePooling1D : public Layer, public MaskedLayer {
 public:
  GlobalAveragePooling1D(std::string name, bool keepdims = false, std::string data_format = "channels_last");
  std::string class_name() const override { return "GlobalAveragePooling1D"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override {
    // mask_ is the mask-making layer's tensor, counted there; its bytes copy is this layer's.
    return bytes_of({&y_, &dx_}) + static_cast<std::int64_t>(mask_bytes_.size());
  }
  Json config() const override;
  // The layer of a Keras config: its "name" and fields; missing fields take Keras's defaults and
  // unknown ones are ignored. The one way layers are made from Python and from model files.
  static std::unique_ptr<Layer> from_config(const Json& config);
  bool keepdims() const { return keepdims_; }

  void set_input_mask(const Tensor& mask) override { mask_ = mask; }
  Tensor output_mask() const override { return Tensor(); }
  bool output_masked(bool /*input_masked*/) const override { return false; }

 private:
  bool keepdims_;
  std::string data_format_;
  Tensor mask_, y_, dx_;                  // mask_: the next (then last) forward's input mask
  std::vector<std::uint8_t> mask_bytes_;  // the last forward's mask (empty: unmasked)
  Shape last_input_shape_;                // of the last forward (its time axis may be any length)
};

}  // namespace mdtrain
