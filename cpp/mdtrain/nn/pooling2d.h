#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/layer.h"
#include "mdtrain/ops/conv_math.h"

namespace mdtrain {

// The 2-D pooling layers on channels_last images, with TF's "valid"/"same" padding.
// Pooling2D holds what MaxPooling2D and AveragePooling2D share: arguments, geometry, config.
class Pooling2D : public Layer {
 public:
  struct Options {
    std::vector<std::int64_t> pool_size{2, 2};
    std::vector<std::int64_t> strides;  // empty: pool_size, as Keras's strides=None
    std::string padding = "valid";
    std::string data_format = "channels_last";
  };

  Shape compute_output_shape(const Shape& input_shape) const override;
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
  Pooling2D(std::string name, Options options, const char* area);
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;
  void check_pool_input(const Tensor& x) const;
  Window2D window_for(const Shape& input_shape) const;  // validated; throws naming the layer
  void copy_pooling_state(const Pooling2D& other) {
    copy_build_state(other);
    window_ = other.window_;
  }

  Options options_;
  const char* area_;
  Window2D window_;  // for the built input shape
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
};

}  // namespace mdtrain
