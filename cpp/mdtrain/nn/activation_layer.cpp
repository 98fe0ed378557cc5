#include "mdtrain/nn/activation_layer.h"

#include "mdtrain/ops/ops.h"

namespace mdtrain {

ActivationLayer::ActivationLayer(std::string name, const std::string& activation)
    : Layer(std::move(name)), activation_(parse_activation(activation)) {}

Tensor ActivationLayer::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  x_ = x;
  ensure_buffer(y_, x.shape(), dtype_, x.device());
  ops::bias_activation(x, Tensor(), activation_, y_);
  return y_;
}

Tensor ActivationLayer::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, y_.shape(), dtype_, y_.device());
  ops::activation_backward(activation_, x_, y_, dy.reshape(y_.shape()), dx_);
  return dx_;
}

std::unique_ptr<Layer> ActivationLayer::clone() const {
  auto copy = std::make_unique<ActivationLayer>(name_, name_of(activation_));
  copy->copy_build_state(*this);
  return copy;
}

Json ActivationLayer::config() const {
  Json c = Layer::config();
  c.set("activation", name_of(activation_));
  return c;
}

std::unique_ptr<Layer> ActivationLayer::from_config(const Json& c) {
  return std::make_unique<ActivationLayer>(c.at("name").as_string(), c.at("activation").as_string());
}

}  // namespace mdtrain
