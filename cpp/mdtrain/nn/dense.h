#pragma once
#include <memory>

#include "mdtrain/nn/initializer.h"
#include "mdtrain/nn/kernel_bias.h"
#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/regularizer.h"
#include "mdtrain/ops/activation.h"

namespace mdtrain {

// keras.layers.Dense: y = activation(x @ kernel + bias) on the last axis.
class Dense : public Layer {
 public:
  struct Options {
    std::int64_t units = 0;
    std::string activation = "linear";
    bool use_bias = true;
    Json kernel_initializer = "glorot_uniform";
    Json bias_initializer = "zeros";
    Json kernel_regularizer;  // null: none
    Json bias_regularizer;
  };
  Dense(std::string name, Options options);

  std::string class_name() const override { return "Dense"; }
  bool has_cuda_kernels() const override { return true; }
  bool supports_gradient_accumulation() const override { return true; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  Activation output_activation() const override { return activation_; }
  Tensor logits() const override;
  Tensor backward_from_logits(const Tensor& dlogits, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  TensorParallelForm tensor_parallel_form() const override { return TensorParallelForm::Dense; }
  std::unique_ptr<Layer> with_output_share(int shards, bool drop_activation) const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&z_, &y_, &dz_, &dx_, &dbias_}); }
  Json config() const override;
  // The layer of a Keras config: its "name" and fields; missing fields take Keras's defaults and
  // unknown ones are ignored. The one way layers are made from Python and from model files.
  static std::unique_ptr<Layer> from_config(const Json& config);

  Parameter& kernel() { return weights_.kernel; }
  Parameter& bias() { return weights_.bias; }
  Activation activation() const { return activation_; }

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Options options_;
  Tensor backward_preactivation(const Tensor& dz, bool need_input_grad);

  Activation activation_;
  KernelBias weights_;  // the kernel, the bias (with use_bias) and their regularizers
  // Per-call state: the input of the last forward (as 2-D), the pre-activation when the
  // activation's gradient needs it, the output, and scratch for backward.
  Tensor x_, z_, y_, dz_, dx_;
  Tensor dbias_;  // accumulating: this call's bias gradient, before it is added
  Shape last_input_shape_;
};

}  // namespace mdtrain
