#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/depthwise_conv2d.h"
#include "mdtrain/nn/kernel_bias.h"
#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/regularizer.h"

namespace mdtrain {

// keras.layers.SeparableConv2D on channels_last images: a depthwise convolution (no bias; kernel
// depthwise_kernel (kh, kw, in, depth_multiplier)) then a pointwise one (pointwise_kernel (1, 1,
// in * depth_multiplier, filters)), + bias (filters) and the activation, as tf.nn.separable_conv2d.
// The depthwise step is ops/depthwise_conv.h's loops; the pointwise step one GEMM over the rows of
// output pixels. Tensor parallelism: replicated only.
class SeparableConv2D : public Layer {
 public:
  struct Options : DepthwiseWindowArgs {
    std::int64_t filters = 0;
    std::string activation = "linear";
    bool use_bias = true;
    Json depthwise_initializer = "glorot_uniform";
    Json pointwise_initializer = "glorot_uniform";
    Json bias_initializer = "zeros";
    Json depthwise_regularizer;  // null: none
    Json pointwise_regularizer;
    Json bias_regularizer;
  };

  SeparableConv2D(std::string name, Options options);

  std::string class_name() const override { return "SeparableConv2D"; }
  bool has_cuda_kernels() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  Activation output_activation() const override { return activation_; }
  Tensor logits() const override;
  Tensor backward_from_logits(const Tensor& dlogits, bool need_input_grad) override;
  // depthwise_kernel, pointwise_kernel, bias: Keras's order.
  std::vector<Parameter*> parameters() override;
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&mid_, &z_, &y_, &dz_, &dmid_, &dx_}); }
  Json config() const override;
  static std::unique_ptr<Layer> from_config(const Json& config);

  Parameter& depthwise_kernel() { return depthwise_; }
  Parameter& pointwise_kernel() { return pointwise_.kernel; }
  Parameter& bias() { return pointwise_.bias; }
  const Options& options() const { return options_; }

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Tensor backward_rows(const Tensor& grad, bool through_activation, bool need_input_grad);
  std::int64_t mid_channels() const { return window_.channels * options_.depth_multiplier; }
  Shape output_dims(std::int64_t images) const { return {images, window_.out_h, window_.out_w, options_.filters}; }
  Shape mid_dims(std::int64_t images) const { return {images, window_.out_h, window_.out_w, mid_channels()}; }

  Options options_;
  Activation activation_;
  Parameter depthwise_;
  std::shared_ptr<Regularizer> depthwise_regularizer_;
  KernelBias pointwise_;  // the pointwise kernel, viewed as (in * depth_multiplier, filters), and the bias
  Window2D window_;
  // Per call: the input, the depthwise output, the pre-activation (when kept), the output, and
  // the gradients of the output, the depthwise output and the input.
  Tensor x_, mid_, z_, y_, dz_, dmid_, dx_;
};

}  // namespace mdtrain
