#include "mdtrain/nn/parametric_activation_layer.h"

#include <cmath>
#include <stdexcept>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {

using Kind = ops::ParametricActivation::Kind;

// The config's finite number at `key` (Keras's default when absent; null is refused: Json::get
// would read it as absent).
double number_of(const std::string& layer, const char* cls, const char* key, const Json& c, double fallback) {
  MDTRAIN_CHECK(!c.contains(key) || !c.at(key).is_null(), std::invalid_argument, "[layers] ", cls, " layer \"", layer,
                "\": ", key, " must be a number, got null");
  const Json v = c.get(key, fallback);
  MDTRAIN_CHECK(v.is_number() && std::isfinite(v.as_number()), std::invalid_argument, "[layers] ", cls, " layer \"",
                layer, "\": ", key, " must be a number, got ", v.dump());
  return v.as_number();
}

}  // namespace

ParametricActivationLayer::ParametricActivationLayer(std::string name, Class cls, ops::ParametricActivation a)
    : Layer(std::move(name)), class_(cls), activation_(a) {
  if (cls == Class::ELU) {
    MDTRAIN_CHECK(a.kind == Kind::ELU && std::isfinite(a.alpha), std::invalid_argument, "[layers] ELU layer \"", name_,
                  "\": alpha must be a finite number, got ", a.alpha);
    return;
  }
  MDTRAIN_CHECK(a.kind == Kind::ReLU, std::invalid_argument, "[layers] layer \"", name_,
                "\": a ReLU or LeakyReLU needs a ReLU activation");
  if (cls == Class::LeakyReLU) {
    MDTRAIN_CHECK(a.negative_slope >= 0.0 && std::isfinite(a.negative_slope), std::invalid_argument,
                  "[layers] LeakyReLU layer \"", name_,
                  "\": The negative_slope value of a Leaky ReLU layer cannot be None or negative value. Expected a "
                  "float. Received: negative_slope=",
                  a.negative_slope);
    MDTRAIN_CHECK(a.threshold == 0.0 && std::isinf(a.max_value), std::invalid_argument, "[layers] LeakyReLU layer \"",
                  name_, "\" has no threshold or max_value");
    return;
  }
  MDTRAIN_CHECK(a.max_value >= 0.0, std::invalid_argument, "[layers] ReLU layer \"", name_,
                "\": max_value of a ReLU layer cannot be a negative value. Received: max_value=", a.max_value);
  MDTRAIN_CHECK(a.negative_slope >= 0.0 && std::isfinite(a.negative_slope), std::invalid_argument,
                "[layers] ReLU layer \"", name_,
                "\": negative_slope of a ReLU layer cannot be None or a negative value. Received: negative_slope=",
                a.negative_slope);
  MDTRAIN_CHECK(a.threshold >= 0.0 && std::isfinite(a.threshold), std::invalid_argument, "[layers] ReLU layer \"",
                name_,
                "\": threshold of a ReLU layer cannot be None or a negative value. Received: threshold=", a.threshold);
}

std::string ParametricActivationLayer::class_name() const {
  switch (class_) {
    case Class::ReLU: return "ReLU";
    case Class::LeakyReLU: return "LeakyReLU";
    case Class::ELU: return "ELU";
  }
  return "ReLU";
}

Tensor ParametricActivationLayer::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  x_ = x;
  ensure_buffer(y_, x.shape(), dtype_, x.device());
  ops::parametric_activation(x, activation_, y_);
  return y_;
}

Tensor ParametricActivationLayer::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, x_.shape(), dtype_, x_.device());
  ops::parametric_activation_backward(activation_, x_, dy.reshape(x_.shape()), dx_);
  return dx_;
}

std::unique_ptr<Layer> ParametricActivationLayer::clone() const {
  auto copy = std::make_unique<ParametricActivationLayer>(name_, class_, activation_);
  copy->copy_build_state(*this);
  return copy;
}

Json ParametricActivationLayer::config() const {
  Json c = Layer::config();
  switch (class_) {
    case Class::ReLU:
      c.set("max_value", std::isinf(activation_.max_value) ? Json() : Json(activation_.max_value));
      c.set("negative_slope", activation_.negative_slope);
      c.set("threshold", activation_.threshold);
      break;
    case Class::LeakyReLU: c.set("negative_slope", activation_.negative_slope); break;
    case Class::ELU: c.set("alpha", activation_.alpha); break;
  }
  return c;
}

std::unique_ptr<Layer> ParametricActivationLayer::from_config_relu(const Json& c) {
  const std::string name = c.at("name").as_string();
  ops::ParametricActivation a;
  const Json max_value = c.get("max_value", Json());
  if (!max_value.is_null()) a.max_value = number_of(name, "ReLU", "max_value", c, 0.0);
  a.negative_slope = number_of(name, "ReLU", "negative_slope", c, 0.0);
  a.threshold = number_of(name, "ReLU", "threshold", c, 0.0);
  return std::make_unique<ParametricActivationLayer>(name, Class::ReLU, a);
}

std::unique_ptr<Layer> ParametricActivationLayer::from_config_leaky_relu(const Json& c) {
  const std::string name = c.at("name").as_string();
  ops::ParametricActivation a;
  // Keras 2's files call it alpha (Keras 3 still takes that keyword).
  const char* key = !c.contains("negative_slope") && c.contains("alpha") ? "alpha" : "negative_slope";
  a.negative_slope = number_of(name, "LeakyReLU", key, c, 0.3);
  return std::make_unique<ParametricActivationLayer>(name, Class::LeakyReLU, a);
}

std::unique_ptr<Layer> ParametricActivationLayer::from_config_elu(const Json& c) {
  const std::string name = c.at("name").as_string();
  ops::ParametricActivation a;
  a.kind = Kind::ELU;
  a.alpha = number_of(name, "ELU", "alpha", c, 1.0);
  return std::make_unique<ParametricActivationLayer>(name, Class::ELU, a);
}

}  // namespace mdtrain
