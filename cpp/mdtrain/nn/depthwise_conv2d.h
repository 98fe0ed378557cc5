#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/kernel_bias.h"
#include "mdtrain/nn/layer.h"
#include "mdtrain/ops/activation.h"
#include "mdtrain/ops/conv_math.h"

namespace mdtrain {

// The window arguments DepthwiseConv2D and SeparableConv2D share (Keras's, checked as Keras does,
// messages prefixed by `area` and naming the layer). padding is lowercased in place.
struct DepthwiseWindowArgs {
  std::vector<std::int64_t> kernel_size;
  std::vector<std::int64_t> strides{1, 1};
  std::string padding = "valid";
  std::int64_t depth_multiplier = 1;
  std::string data_format = "channels_last";
  std::vector<std::int64_t> dilation_rate{1, 1};

  void check(const char* area, const std::string& layer);
  // The depthwise window on an (h, w, channels) input; Keras's errors for another rank or a
  // window larger than a "valid" input.
  Window2D window_for(const char* area, const std::string& layer, const Shape& input_shape) const;
  // From / into a Keras config (missing fields take Keras's defaults).
  void read_config(const Json& config);
  void write_config(Json& config) const;
};

// keras.layers.DepthwiseConv2D on channels_last images: each input channel c convolved with its
// own depth_multiplier filters, kernel (kh, kw, in_channels, depth_multiplier) (Keras 3 names it
// "kernel"), output channel c * depth_multiplier + m, then + bias (in * depth_multiplier) and the
// activation. Computed by direct loops (ops/depthwise_conv.h) on the CPU and CUDA kernels that
// share their per-element math. Tensor parallelism: replicated only.
class DepthwiseConv2D : public Layer {
 public:
  struct Options : DepthwiseWindowArgs {
    std::string activation = "linear";
    bool use_bias = true;
    Json depthwise_initializer = "glorot_uniform";
    Json bias_initializer = "zeros";
    Json depthwise_regularizer;  // null: none
    Json bias_regularizer;
  };

  DepthwiseConv2D(std::string name, Options options);

  std::string class_name() const override { return "DepthwiseConv2D"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  Activation output_activation() const override { return activation_; }
  Tensor logits() const override;
  Tensor backward_from_logits(const Tensor& dlogits, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override { return weights_.parameters(built_, options_.use_bias); }
  double regularization_loss() const override { return weights_.regularization_loss(built_, options_.use_bias); }
  void add_regularization_gradients() override { weights_.add_regularization_gradients(options_.use_bias); }
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&z_, &y_, &dz_, &dx_}); }
  Json config() const override;
  static std::unique_ptr<Layer> from_config(const Json& config);

  Parameter& kernel() { return weights_.kernel; }
  Parameter& bias() { return weights_.bias; }
  const Options& options() const { return options_; }

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Tensor backward_rows(const Tensor& grad, bool through_activation, bool need_input_grad);
  Shape output_dims(std::int64_t images) const {
    return {images, window_.out_h, window_.out_w, window_.channels * options_.depth_multiplier};
  }

  Options options_;
  Activation activation_;
  KernelBias weights_;
  Window2D window_;
  Tensor x_, z_, y_, dz_, dx_;  // per call: input, pre-activation (when kept), output, gradients
};

// Checks a window layer's input (rank 4, the built channels and shape) with Keras's messages.
void check_image_layer_input(const char* area, const Layer& layer, const Tensor& x);

}  // namespace mdtrain
