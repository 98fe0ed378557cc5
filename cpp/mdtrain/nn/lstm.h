#pragma once
#include <memory>
#include <vector>

#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/regularizer.h"

namespace mdtrain {

// keras.layers.LSTM on inputs (batch, timesteps, features), with Keras's weights, so a Keras
// model's weights load unchanged: kernel (features, 4u), recurrent_kernel (u, 4u), bias (4u), the
// gates in Keras's order i, f, c, o. Output: the last h (batch, u), or every step's h
// (batch, timesteps, u) with return_sequences; go_backwards reads the sequence last step first
// (and, as in Keras, returns the steps in that reversed order).
//
// Forward runs time-major: the input projection of every step is one GEMM
// ((timesteps * batch, features) @ kernel + bias), then per step one GEMM h_prev @
// recurrent_kernel and the cell's element-wise op (ops/recurrent.h). It keeps every step's gates,
// c and h for backward through time, whose weight gradients are again one GEMM each over all steps.
class LSTM : public Layer {
 public:
  struct Options {
    std::int64_t units = 0;
    std::string activation = "tanh";               // only tanh for now
    std::string recurrent_activation = "sigmoid";  // only sigmoid for now
    bool use_bias = true;
    Json kernel_initializer = "glorot_uniform";
    Json recurrent_initializer = "orthogonal";
    Json bias_initializer = "zeros";
    bool unit_forget_bias = true;                                      // the forget gate's bias starts at 1
    Json kernel_regularizer, recurrent_regularizer, bias_regularizer;  // null: none
    bool return_sequences = false;
    bool go_backwards = false;
  };
  LSTM(std::string name, Options options);

  std::string class_name() const override { return "LSTM"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::vector<Parameter*> parameters() override;
  double regularization_loss() const override;
  void add_regularization_gradients() override;
  std::unique_ptr<Layer> clone() const override;
  Json config() const override;
  // Keras's config; missing fields take Keras's defaults. Options mdtrain does not have yet
  // (dropout, recurrent_dropout, return_state, stateful, unroll, constraints, other activations)
  // are std::invalid_argument naming the layer and the argument.
  static std::unique_ptr<Layer> from_config(const Json& config);

  const Options& options() const { return options_; }

 protected:
  void build_weights(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Options options_;
  std::shared_ptr<Regularizer> kernel_reg_, recurrent_reg_, bias_reg_;
  Parameter kernel_, recurrent_kernel_, bias_;
  // Per-call state, time-major (row t * batch + b): the input, the pre-activations (then their
  // gradients), the activated gates, c and h of steps 0..T (step 0: the zero initial state).
  std::int64_t batch_ = 0, steps_ = 0;
  std::vector<std::int64_t> to_time_major_, to_batch_major_;
  Tensor xt_, z_, gates_, c_, h_, y_, dh_, dc_, dxt_, dx_;
};

}  // namespace mdtrain
