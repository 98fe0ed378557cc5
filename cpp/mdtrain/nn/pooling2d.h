#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/layer.h"
#include "mdtrain/ops/conv_math.h"

namespace mdtrain {

// The 2-D pooling layers on channels_last images, with TF's "valid"/"same" padding.
// Pooling2D holds what MaxPooling2D and AveragePooling2D share: arguments, geometry, config.
// With spatial_rank 1 they are the 1-D pools (nn/pooling1d.h): a (batch, steps, channels) input
// pools as the image (batch, 1, steps, channels), options_ hold 1-tuples.
class Pooling2D : public Layer {
 public:
  struct Options {
    std::vector<std::int64_t> pool_size{2, 2};
    std::vector<std::int64_t> strides;  // empty: pool_size, as Keras's strides=None
    std::string padding = "valid";
    std::string data_format = "channels_last";
  };

  Shape compute_output_shape(const Shape& input_shape) const override;
  bool supports_unknown_dims() const override { return true; }
  // Both pools run on GPUs: their buffers follow the input's device.
  bool has_cuda_kernels() const override { return true; }
  std::int64_t held_activation_bytes() const override { return bytes_of({&y_, &dx_}); }
  Json config() const override;
  const Options& options() const { return options_; }
  // The options of a Keras config (pool_size, strides, padding, data_format; missing fields take
  // Keras's defaults, strides null or absent means pool_size, unknown fields are ignored).
  static Options options_from_config(const Json& config);

 protected:
  // `area` prefixes messages ("max_pooling2d"); it must outlive the layer (a string literal).
  Pooling2D(std::string name, Options options, const char* area, int spatial_rank = 2);
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;
  // Checks x, fits the geometry to its size, and returns it as an image (a rank-1 layer's sequence
  // as one row).
  Tensor check_pool_input(const Tensor& x);
  // An image-shaped result (output or input gradient) in the layer's own rank.
  Tensor in_layer_rank(const Tensor& image) const {
    return spatial_rank_ == 1 ? image.reshape({image.dim(0), image.dim(2), image.dim(3)}) : image;
  }
  Window2D window_for(const Shape& input_shape) const;  // validated; throws naming the layer
  void copy_pooling_state(const Pooling2D& other) {
    copy_build_state(other);
    window_ = other.window_;
  }

  Options options_;
  const char* area_;
  int spatial_rank_;
  Window2D window_;  // for the last forward's input size (the built one before)
  Tensor y_, dx_;
};

// keras.layers.MaxPooling2D: the maximum of each window; backward routes each output's gradient
// to the element that won (remembered as argmax indices by forward).
class MaxPooling2D : public Pooling2D {
 public:
  MaxPooling2D(std::string name, Options options) : Pooling2D(std::move(name), std::move(options), "max_pooling2d") {}
  std::string class_name() const override { return "MaxPooling2D"; }
  // The layer of a Keras config: "name" and Pooling2D::options_from_config.
  static std::unique_ptr<Layer> from_config(const Json& config);
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override {
    return Pooling2D::held_activation_bytes() + bytes_of({&argmax_});
  }

 protected:
  MaxPooling2D(std::string name, Options options, const char* area, int spatial_rank)
      : Pooling2D(std::move(name), std::move(options), area, spatial_rank) {}

 private:
  Tensor argmax_;  // Int32, the output's shape
};

// keras.layers.AveragePooling2D: the mean of each window's in-bounds elements (with "same"
// padding the padding is not counted, as in TF).
class AveragePooling2D : public Pooling2D {
 public:
  AveragePooling2D(std::string name, Options options)
      : Pooling2D(std::move(name), std::move(options), "average_pooling2d") {}
  std::string class_name() const override { return "AveragePooling2D"; }
  // The layer of a Keras config: "name" and Pooling2D::options_from_config.
  static std::unique_ptr<Layer> from_config(const Json& config);
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;

 protected:
  AveragePooling2D(std::string name, Options options, const char* area, int spatial_rank)
      : Pooling2D(std::move(name), std::move(options), area, spatial_rank) {}
};

}  // namespace mdtrain
