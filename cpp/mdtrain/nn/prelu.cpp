#include "mdtrain/nn/prelu.h"

#include <algorithm>
#include <stdexcept>

#include "mdtrain/core/errors.h"
#include "mdtrain/nn/initializer.h"
#include "mdtrain/ops/parametric_activation.h"

namespace mdtrain {

namespace {

// Keras's compute_fans for a weight of this shape.
std::pair<std::int64_t, std::int64_t> fans_of(const Shape& s) {
  if (s.empty()) return {1, 1};
  if (s.size() == 1) return {s[0], s[0]};
  if (s.size() == 2) return {s[0], s[1]};
  std::int64_t receptive = 1;
  for (std::size_t i = 0; i + 2 < s.size(); ++i) receptive *= s[i];
  return {s[s.size() - 2] * receptive, s.back() * receptive};
}

}  // namespace

PReLU::PReLU(std::string name, Options options)
    : Layer(std::move(name)), options_(std::move(options)), regularizer_(make_regularizer(options_.alpha_regularizer)) {
  make_initializer(options_.alpha_initializer);
}

Shape PReLU::alpha_shape(const Shape& input_shape) const {
  Shape shape = input_shape;
  Shape full{-1};
  full.insert(full.end(), input_shape.begin(), input_shape.end());
  for (int a : options_.shared_axes) {
    MDTRAIN_CHECK(a >= 1 && a <= static_cast<int>(input_shape.size()), std::invalid_argument, "[layers] PReLU layer \"",
                  name_, "\": shared_axes must be axes of the input from 1 (the first after the batch) to ",
                  input_shape.size(), " for input shape ", to_string(full), ", got ", a);
    shape[static_cast<std::size_t>(a - 1)] = 1;
  }
  return shape;
}

Shape PReLU::compute_output_shape(const Shape& input_shape) const {
  MDTRAIN_CHECK(!input_shape.empty(), std::invalid_argument, "[layers] PReLU layer \"", name_,
                "\" needs inputs of rank >= 2 (batch, features, ...), got input shape (None,)");
  alpha_shape(input_shape);
  return input_shape;
}

void PReLU::build_weights(const Shape& input_shape, std::uint64_t seed) {
  const Shape shape = alpha_shape(input_shape);
  alpha_ = Parameter(name_ + "/alpha", Tensor(shape, dtype_));
  Rng rng(seed, 0);
  const auto [fan_in, fan_out] = fans_of(shape);
  make_initializer(options_.alpha_initializer)->fill(alpha_.value, fan_in, fan_out, rng);
}

Tensor PReLU::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  x_ = x;
  ensure_buffer(y_, x.shape(), dtype_, x.device());
  ops::prelu(x, alpha_.value, y_);
  return y_;
}

Tensor PReLU::backward(const Tensor& dy, bool need_input_grad) {
  const Tensor g = dy.reshape(x_.shape());
  if (need_input_grad) ensure_buffer(dx_, x_.shape(), dtype_, x_.device());
  ops::prelu_backward(x_, alpha_.value, g, need_input_grad ? &dx_ : nullptr, alpha_.grad);
  return need_input_grad ? dx_ : Tensor();
}

std::vector<Parameter*> PReLU::parameters() {
  if (!built_) return {};
  return {&alpha_};
}

double PReLU::regularization_loss() const { return regularizer_ && built_ ? regularizer_->loss(alpha_.value) : 0.0; }

void PReLU::add_regularization_gradients() {
  if (regularizer_ && built_) regularizer_->add_gradient(alpha_.value, alpha_.grad);
}

std::unique_ptr<Layer> PReLU::clone() const {
  auto copy = std::make_unique<PReLU>(name_, options_);
  copy->copy_build_state(*this);
  if (built_) copy->alpha_ = Parameter(alpha_.name, alpha_.value.clone());
  return copy;
}

Json PReLU::config() const {
  Json c = Layer::config();
  c.set("alpha_initializer", make_initializer(options_.alpha_initializer)->config());
  c.set("alpha_regularizer", regularizer_ ? regularizer_->config() : Json());
  c.set("alpha_constraint", Json());
  if (options_.shared_axes_given) {
    Json::Array axes;
    for (int a : options_.shared_axes) axes.emplace_back(a);
    c.set("shared_axes", Json(axes));
  } else {
    c.set("shared_axes", Json());
  }
  return c;
}

std::unique_ptr<Layer> PReLU::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  const Json constraint = c.get("alpha_constraint", Json());
  MDTRAIN_CHECK(constraint.is_null(), std::invalid_argument, "[layers] PReLU layer \"", name,
                "\": alpha_constraint is not supported by mdtrain (weight constraints are not implemented), got ",
                constraint.dump());
  Options o;
  o.alpha_initializer = c.get("alpha_initializer", "zeros");
  o.alpha_regularizer = c.get("alpha_regularizer", Json());
  const Json shared = c.get("shared_axes", Json());
  auto axis_of = [&](const Json& a) {
    MDTRAIN_CHECK(a.is_number() && a.as_number() == static_cast<double>(static_cast<int>(a.as_number())),
                  std::invalid_argument, "[layers] PReLU layer \"", name,
                  "\": shared_axes must be an int or a list of ints, got ", shared.dump());
    return static_cast<int>(a.as_number());
  };
  if (shared.is_array()) {
    o.shared_axes_given = true;
    for (const Json& a : shared.as_array()) o.shared_axes.push_back(axis_of(a));
  } else if (!shared.is_null()) {
    o.shared_axes_given = true;
    o.shared_axes.push_back(axis_of(shared));  // Keras keeps an int as a list of one
  }
  return std::make_unique<PReLU>(name, o);
}

}  // namespace mdtrain
