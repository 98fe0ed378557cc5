#include "mdtrain/nn/simple_rnn.h"

#include "mdtrain/ops/ops.h"

namespace mdtrain {

SimpleRNN::SimpleRNN(std::string name, Options options)
    : RecurrentLayer(std::move(name), std::move(options), "simple_rnn", 1),
      activation_(parse_activation(options_.activation)) {
  MDTRAIN_CHECK(activation_ != Activation::Softmax && !needs_forward_input(activation_), std::invalid_argument,
                "[simple_rnn] layer \"", name_, "\": activation=\"", options_.activation,
                "\" is not supported yet (tanh, relu, sigmoid or linear)");
}

void SimpleRNN::step_forward(std::int64_t t) {
  // z stays in xz_ (the activations' gradients need only the output, h).
  Tensor z = step_rows(xz_, t), h = step_rows(h_, t + 1);
  ops::gemm(recurrent_input(t), false, weights_.recurrent_kernel.value, false, z, 1.0, 1.0);
  ops::bias_activation(z, Tensor(), activation_, h);
}

void SimpleRNN::step_backward(std::int64_t t) {
  if (t + 1 == steps_) {
    dxz_ = xz_;
    dhz_ = xz_;
  }
  Tensor dz = step_rows(dxz_, t);
  ops::activation_backward(activation_, step_rows(xz_, t), step_rows(h_, t + 1), step_rows(dh_, t), dz);
}

std::unique_ptr<Layer> SimpleRNN::clone() const {
  auto copy = std::make_unique<SimpleRNN>(name_, options_);
  copy_weights_to(*copy);
  return copy;
}

std::unique_ptr<Layer> SimpleRNN::from_config(const Json& c) {
  return std::make_unique<SimpleRNN>(c.at("name").as_string(), options_from_config(c, "simple_rnn"));
}

}  // namespace mdtrain
