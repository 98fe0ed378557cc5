#pragma once
#include <memory>

#include "mdtrain/nn/recurrent_layer.h"

namespace mdtrain {

// keras.layers.SimpleRNN (nn/recurrent_layer.h): h = activation(x @ kernel + h_prev @
// recurrent_kernel + bias), kernel (features, u), recurrent_kernel (u, u), bias (u). activation:
// tanh (Keras's default), relu, sigmoid or linear.
class SimpleRNN : public RecurrentLayer {
 public:
  using Options = RecurrentLayer::Options;
  SimpleRNN(std::string name, Options options);

  std::string class_name() const override { return "SimpleRNN"; }
  std::unique_ptr<Layer> clone() const override;
  static std::unique_ptr<Layer> from_config(const Json& config);

 protected:
  void step_forward(std::int64_t t) override;
  void step_backward(std::int64_t t) override;
  void ensure_cell_buffers(std::int64_t /*rows*/) override {}

 private:
  Activation activation_;
};

}  // namespace mdtrain
