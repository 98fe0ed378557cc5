#pragma once
#include <memory>

#include "mdtrain/nn/gamma_beta.h"
#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/regularizer.h"

namespace mdtrain {

// keras.layers.LayerNormalization over the last axis: per sample (and per position of a
// sequence or feature map), y = gamma * (x - mean) / sqrt(var + epsilon) + beta with the mean
// and biased variance over the last axis; gamma and beta have shape (last_dim,). The same in
// training and inference, and independent of how a batch is split across replicas.
// Weights in Keras's order: gamma (if scale), beta (if center).
// On a GPU everything runs on the device but the weight gradients: their float64 per-feature sums
// are rounded to the weights' dtype on the host (a few KB).
class LayerNormalization : public Layer {
 public:
  struct Options {
    std::int64_t axis = -1;  // only the last axis (-1 or its index) is supported
    double epsilon = 1e-3;
    bool center = true;  // beta
    bool scale = true;   // gamma
    Json beta_initializer = "zeros";
    Json gamma_initializer = "ones";
    Json beta_regularizer;  // null: none
    Json gamma_regularizer;
  };
  LayerNormalization(std::string name, Options options);

  std::string class_name() const override { return "LayerNormalization"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override {
    return bytes_of({&xhat_, &inv_std_, &y_, &dx_, &sum_dy_, &sum_dy_xhat_});
  }
  bool has_cuda_kernels() const override { return true; }
  Json config() const override;
  // The layer of a Keras config: its "name" and fields; missing fields take Keras's defaults and
  // unknown ones are ignored. The one way layers are made from Python and from model files.
  static std::unique_ptr<Layer> from_config(const Json& config);

  const Options& options() const { return options_; }
  Parameter& gamma() { return gamma_beta_.gamma; }
  Parameter& beta() { return gamma_beta_.beta; }

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Options options_;
  GammaBeta gamma_beta_;  // gamma (with scale), beta (with center) and their regularizers
  std::int64_t features_ = 0;
  // Per-call state: the normalized input and per-row inverse deviations of the last forward.
  Tensor xhat_, inv_std_, y_, dx_, sum_dy_, sum_dy_xhat_;
  Shape last_input_shape_;
};

}  // namespace mdtrain
