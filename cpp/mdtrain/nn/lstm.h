#pragma once
#include <memory>

#include "mdtrain/nn/recurrent_layer.h"

namespace mdtrain {

// keras.layers.LSTM (nn/recurrent_layer.h): kernel (features, 4u), recurrent_kernel (u, 4u),
// bias (4u), the gates in Keras's order i, f, c, o; unit_forget_bias starts the forget gate's bias
// at 1. activation and recurrent_activation: linear, relu, sigmoid or tanh (Keras's tanh and sigmoid by default).
class LSTM : public RecurrentLayer {
 public:
  using Options = RecurrentLayer::Options;
  LSTM(std::string name, Options options);

  std::string class_name() const override { return "LSTM"; }
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override {
    return RecurrentLayer::held_activation_bytes() + bytes_of({&gates_buf_, &c_, &dc_, &held_dc_});
  }
  std::int64_t state_count() const override { return 2; }  // h, c
  Json config() const override;
  // Keras's config; missing fields take Keras's defaults. Options mdtrain does not have yet
  // (dropout, recurrent_dropout, return_state, stateful, constraints, other activations) are
  // std::invalid_argument naming the layer and the argument.
  static std::unique_ptr<Layer> from_config(const Json& config);

 protected:
  void init_bias(Tensor& bias) override;
  void step_forward(std::int64_t t) override;
  void begin_backward_steps() override;
  void step_backward(std::int64_t t) override;
  void ensure_cell_buffers(std::int64_t rows) override;
  void load_initial_cell_state(const std::vector<Tensor>& states) override;
  void append_final_cell_state(std::vector<Tensor>& states) const override;
  void append_initial_cell_gradient(std::vector<Tensor>& grads) const override;
  void carry_cell_state(std::int64_t t, std::int64_t row) override;
  void hold_cell_gradient(std::int64_t row, bool hold) override;

 private:
  // Per step (time-major): the activated gates and c of steps 0..T; dL/dc of the current step.
  Tensor gates_buf_, c_, dc_;
  Tensor held_dc_;
  // activation (tanh) and recurrent_activation (sigmoid): Keras's defaults run the fused cell ops
  // (ops/recurrent.h); linear, relu, sigmoid, tanh otherwise run plain loops (CPU).
  Activation activation_, recurrent_activation_;
  bool keras_default_activations() const;
  void step_forward_any_activation(std::int64_t t);
  void step_backward_any_activation(std::int64_t t);  // dL/dc of masked sequences during a step's backward
};

}  // namespace mdtrain
