#include "mdtrain/nn/separable_conv2d.h"

#include "mdtrain/nn/window_args.h"
#include "mdtrain/ops/depthwise_conv.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

namespace {
constexpr const char* kArea = "separable_conv2d";
}  // namespace

SeparableConv2D::SeparableConv2D(std::string name, Options options)
    : Layer(std::move(name)), options_(std::move(options)), activation_(parse_activation(options_.activation)) {
  MDTRAIN_CHECK(options_.filters > 0, std::invalid_argument, "[", kArea, "] layer \"", name_,
                "\": Invalid value for argument `filters`. Expected a strictly positive value. Received filters=",
                options_.filters, ".");
  options_.check(kArea, name_);
  make_initializer(options_.depthwise_initializer);
  make_initializer(options_.pointwise_initializer);
  make_initializer(options_.bias_initializer);
  depthwise_regularizer_ = make_regularizer(options_.depthwise_regularizer);
  pointwise_.kernel_regularizer = make_regularizer(options_.pointwise_regularizer);
  pointwise_.bias_regularizer = make_regularizer(options_.bias_regularizer);
}

Shape SeparableConv2D::compute_output_shape(const Shape& input_shape) const {
  const Window2D g = options_.window_for(kArea, name_, input_shape);
  return {g.out_h, g.out_w, options_.filters};
}

void SeparableConv2D::build_weights(const Shape& input_shape, std::uint64_t seed) {
  window_ = options_.window_for(kArea, name_, input_shape);
  const std::int64_t kh = window_.k_h, kw = window_.k_w, cin = window_.channels, dm = options_.depth_multiplier,
                     filters = options_.filters;
  Rng rng(seed, 0);
  depthwise_ = Parameter(name_ + "/depthwise_kernel", Tensor({kh, kw, cin, dm}, dtype_));
  make_initializer(options_.depthwise_initializer)->fill(depthwise_.value, kh * kw * cin, kh * kw * dm, rng);
  Rng pointwise_rng(seed, 2);
  pointwise_.kernel = Parameter(name_ + "/pointwise_kernel", Tensor({1, 1, cin * dm, filters}, dtype_));
  make_initializer(options_.pointwise_initializer)->fill(pointwise_.kernel.value, cin * dm, filters, pointwise_rng);
  if (options_.use_bias) {
    pointwise_.bias = Parameter(name_ + "/bias", Tensor({filters}, dtype_));
    Rng bias_rng(seed, 1);
    make_initializer(options_.bias_initializer)->fill(pointwise_.bias.value, filters, filters, bias_rng);
  }
}

std::vector<Parameter*> SeparableConv2D::parameters() {
  if (!built_) return {};
  std::vector<Parameter*> p{&depthwise_};
  for (Parameter* q : pointwise_.parameters(built_, options_.use_bias)) p.push_back(q);
  return p;
}

double SeparableConv2D::regularization_loss() const {
  double l = pointwise_.regularization_loss(built_, options_.use_bias);
  if (depthwise_regularizer_ && built_) l += depthwise_regularizer_->loss(depthwise_.value);
  return l;
}

void SeparableConv2D::add_regularization_gradients() {
  if (depthwise_regularizer_) depthwise_regularizer_->add_gradient(depthwise_.value, depthwise_.grad);
  pointwise_.add_regularization_gradients(options_.use_bias);
}

Tensor SeparableConv2D::forward(const Tensor& x, const ForwardContext&) {
  check_image_layer_input(kArea, *this, x);
  check_input(x);
  x_ = x;
  const std::int64_t images = x.dim(0), rows = images * window_.out_h * window_.out_w, filters = options_.filters;
  const Device& device = x.device();
  const bool keep = keeps_preactivation(activation_);
  ensure_buffer(mid_, mid_dims(images), dtype_, device);
  ensure_buffer(y_, {rows, filters}, dtype_, device);
  if (keep) ensure_buffer(z_, {rows, filters}, dtype_, device);
  ops::depthwise_conv2d(x, depthwise_.value, window_, options_.depth_multiplier, mid_);
  Tensor& z = keep ? z_ : y_;
  ops::gemm(mid_.reshape({rows, mid_channels()}), false, pointwise_.kernel.value.reshape({mid_channels(), filters}),
            false, z);
  pointwise_.add_bias_and_activate(z, options_.use_bias, activation_, keep, y_);
  return y_.reshape(output_dims(images));
}

Tensor SeparableConv2D::logits() const {
  MDTRAIN_CHECK(keeps_preactivation(activation_), std::logic_error, "[", kArea, "] layer \"", name_,
                "\" keeps no logits for activation ", name_of(activation_));
  return z_.reshape(output_dims(x_.dim(0)));
}

Tensor SeparableConv2D::backward(const Tensor& dy, bool need_input_grad) {
  return backward_rows(dy, activation_ != Activation::Linear, need_input_grad);
}

Tensor SeparableConv2D::backward_from_logits(const Tensor& dlogits, bool need_input_grad) {
  return backward_rows(dlogits, false, need_input_grad);
}

Tensor SeparableConv2D::backward_rows(const Tensor& grad, bool through_activation, bool need_input_grad) {
  const std::int64_t images = x_.dim(0), rows = images * window_.out_h * window_.out_w, filters = options_.filters;
  MDTRAIN_CHECK(grad.numel() == y_.numel(), std::invalid_argument, "[", kArea, "] layer \"", name_,
                "\": the output gradient has shape ", to_string(grad.shape()), ", the last forward produced ",
                to_string(output_dims(images)));
  const Device& device = x_.device();
  Tensor dz = grad.reshape({rows, filters});
  if (through_activation) {
    ensure_buffer(dz_, y_.shape(), dtype_, device);
    const bool keep = keeps_preactivation(activation_);
    ops::activation_backward(activation_, keep ? z_ : Tensor(), y_, dz, dz_);
    dz = dz_;
  }
  if (options_.use_bias) ops::sum_rows(dz, pointwise_.bias.grad);
  const Tensor mid = mid_.reshape({rows, mid_channels()});
  Tensor dp = pointwise_.kernel.grad.reshape({mid_channels(), filters});
  ops::gemm(mid, true, dz, false, dp);
  ensure_buffer(dmid_, mid_dims(images), dtype_, device);
  Tensor dmid = dmid_.reshape({rows, mid_channels()});
  ops::gemm(dz, false, pointwise_.kernel.value.reshape({mid_channels(), filters}), true, dmid);
  ops::depthwise_conv2d_kernel_grad(x_, dmid_, window_, options_.depth_multiplier, depthwise_.grad);
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, x_.shape(), dtype_, device);
  ops::depthwise_conv2d_input_grad(dmid_, depthwise_.value, window_, options_.depth_multiplier, dx_);
  return dx_;
}

std::unique_ptr<Layer> SeparableConv2D::clone() const {
  auto copy = std::make_unique<SeparableConv2D>(name_, options_);
  copy->copy_build_state(*this);
  copy->window_ = window_;
  if (built_) copy->depthwise_ = Parameter(depthwise_.name, depthwise_.value.clone());
  copy->pointwise_.copy_values_from(pointwise_, built_, options_.use_bias);
  return copy;
}

Json SeparableConv2D::config() const {
  Json c = Layer::config();
  options_.write_config(c);
  c.set("filters", options_.filters);
  c.set("kernel_size", pair_to_json(options_.kernel_size));
  c.set("strides", pair_to_json(options_.strides));
  c.set("padding", options_.padding);
  c.set("data_format", options_.data_format);
  c.set("dilation_rate", pair_to_json(options_.dilation_rate));
  c.set("activation", name_of(activation_));
  c.set("use_bias", options_.use_bias);
  c.set("depthwise_initializer", make_initializer(options_.depthwise_initializer)->config());
  c.set("pointwise_initializer", make_initializer(options_.pointwise_initializer)->config());
  c.set("bias_initializer", make_initializer(options_.bias_initializer)->config());
  c.set("depthwise_regularizer", depthwise_regularizer_ ? depthwise_regularizer_->config() : Json());
  c.set("pointwise_regularizer", pointwise_.kernel_regularizer ? pointwise_.kernel_regularizer->config() : Json());
  c.set("bias_regularizer", pointwise_.bias_regularizer ? pointwise_.bias_regularizer->config() : Json());
  c.set("activity_regularizer", Json());
  c.set("depthwise_constraint", Json());
  c.set("pointwise_constraint", Json());
  c.set("bias_constraint", Json());
  return c;
}

std::unique_ptr<Layer> SeparableConv2D::from_config(const Json& c) {
  Options o;
  o.read_config(c);
  o.filters = c.at("filters").as_int();
  o.activation = c.get("activation", "linear").as_string();
  o.use_bias = c.get("use_bias", true).as_bool();
  o.depthwise_initializer = c.get("depthwise_initializer", "glorot_uniform");
  o.pointwise_initializer = c.get("pointwise_initializer", "glorot_uniform");
  o.bias_initializer = c.get("bias_initializer", "zeros");
  o.depthwise_regularizer = c.get("depthwise_regularizer", Json());
  o.pointwise_regularizer = c.get("pointwise_regularizer", Json());
  o.bias_regularizer = c.get("bias_regularizer", Json());
  return std::make_unique<SeparableConv2D>(c.at("name").as_string(), o);
}

}  // namespace mdtrain
