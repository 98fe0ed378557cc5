#include "mdtrain/nn/dense.h"

#include "mdtrain/ops/ops.h"

namespace mdtrain {

Dense::Dense(std::string name, Options options)
    : Layer(std::move(name)), options_(std::move(options)), activation_(parse_activation(options_.activation)) {
  MDTRAIN_CHECK(options_.units > 0, std::invalid_argument, "[dense] layer \"", name_,
                "\": units must be a positive integer, got ", options_.units);
  make_initializer(options_.kernel_initializer);  // validate names now, not at build time
  make_initializer(options_.bias_initializer);
  kernel_regularizer_ = make_regularizer(options_.kernel_regularizer);
  bias_regularizer_ = make_regularizer(options_.bias_regularizer);
}

Shape Dense::compute_output_shape(const Shape& input_shape) const {
  MDTRAIN_CHECK(!input_shape.empty(), std::invalid_argument, "[dense] layer \"", name_,
                "\" needs inputs of rank >= 2 (batch, features), got input shape (batch,)");
  Shape out = input_shape;
  out.back() = options_.units;
  return out;
}

void Dense::build_weights(const Shape& input_shape, std::uint64_t seed) {
  const std::int64_t in = input_shape.back(), units = options_.units;
  Rng rng(seed, 0);
  kernel_ = Parameter(name_ + "/kernel", Tensor({in, units}, dtype_));
  make_initializer(options_.kernel_initializer)->fill(kernel_.value, in, units, rng);
  if (options_.use_bias) {
    bias_ = Parameter(name_ + "/bias", Tensor({units}, dtype_));
    Rng bias_rng(seed, 1);
    make_initializer(options_.bias_initializer)->fill(bias_.value, units, 0, bias_rng);
  }
}

Tensor Dense::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  const std::int64_t in = input_shape_.back(), units = options_.units;
  last_input_shape_ = x.shape();
  x_ = x.reshape({-1, in});
  const std::int64_t rows = x_.dim(0);
  ensure_buffer(y_, {rows, units}, dtype_, x.device());
  const Tensor no_bias;
  const Tensor& b = options_.use_bias ? bias_.value : no_bias;
  if (keeps_preactivation()) {
    // z = x @ kernel + bias stays for GELU's gradient and as the logits of softmax/sigmoid.
    ensure_buffer(z_, {rows, units}, dtype_, x.device());
    ops::gemm(x_, false, kernel_.value, false, z_);
    ops::bias_activation(z_, b, Activation::Linear, z_);
    ops::bias_activation(z_, Tensor(), activation_, y_);
  } else {
    ops::gemm(x_, false, kernel_.value, false, y_);
    ops::bias_activation(y_, b, activation_, y_);
  }
  Shape out = last_input_shape_;
  out.back() = units;
  return y_.reshape(out);
}

bool Dense::keeps_preactivation() const {
  return activation_ == Activation::GELU || activation_ == Activation::Softmax || activation_ == Activation::Sigmoid;
}

Tensor Dense::logits() const {
  MDTRAIN_CHECK(keeps_preactivation(), std::logic_error, "[dense] layer \"", name_, "\" keeps no logits for activation ",
                name_of(activation_));
  Shape out = last_input_shape_;
  out.back() = options_.units;
  return z_.reshape(out);
}

Tensor Dense::backward(const Tensor& dy, bool need_input_grad) {
  Tensor dy2 = dy.reshape({-1, options_.units});
  if (activation_ == Activation::Linear) return backward_preactivation(dy2, need_input_grad);
  ensure_buffer(dz_, dy2.shape(), dtype_, dy2.device());
  ops::activation_backward(activation_, z_, y_, dy2, dz_);
  return backward_preactivation(dz_, need_input_grad);
}

Tensor Dense::backward_from_logits(const Tensor& dlogits, bool need_input_grad) {
  return backward_preactivation(dlogits.reshape({-1, options_.units}), need_input_grad);
}

Tensor Dense::backward_preactivation(const Tensor& dz, bool need_input_grad) {
  ops::gemm(x_, true, dz, false, kernel_.grad);
  if (options_.use_bias) ops::sum_rows(dz, bias_.grad);
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, x_.shape(), dtype_, x_.device());
  ops::gemm(dz, false, kernel_.value, true, dx_);
  return dx_.reshape(last_input_shape_);
}

std::vector<Parameter*> Dense::parameters() {
  if (!built_) return {};
  if (options_.use_bias) return {&kernel_, &bias_};
  return {&kernel_};
}

double Dense::regularization_loss() const {
  double l = 0;
  if (kernel_regularizer_ && built_) l += kernel_regularizer_->loss(kernel_.value);
  if (bias_regularizer_ && built_ && options_.use_bias) l += bias_regularizer_->loss(bias_.value);
  return l;
}

void Dense::add_regularization_gradients() {
  if (kernel_regularizer_) kernel_regularizer_->add_gradient(kernel_.value, kernel_.grad);
  if (bias_regularizer_ && options_.use_bias) bias_regularizer_->add_gradient(bias_.value, bias_.grad);
}

std::unique_ptr<Layer> Dense::clone() const {
  auto copy = std::make_unique<Dense>(name_, options_);
  copy->copy_build_state(*this);
  if (built_) {
    copy->kernel_ = Parameter(kernel_.name, kernel_.value.clone());
    if (options_.use_bias) copy->bias_ = Parameter(bias_.name, bias_.value.clone());
  }
  return copy;
}

Json Dense::config() const {
  Json c = Layer::config();
  c.set("units", options_.units);
  c.set("activation", name_of(activation_));
  c.set("use_bias", options_.use_bias);
  c.set("kernel_initializer", make_initializer(options_.kernel_initializer)->config());
  c.set("bias_initializer", make_initializer(options_.bias_initializer)->config());
  c.set("kernel_regularizer", kernel_regularizer_ ? kernel_regularizer_->config() : Json());
  c.set("bias_regularizer", bias_regularizer_ ? bias_regularizer_->config() : Json());
  return c;
}

}  // namespace mdtrain
