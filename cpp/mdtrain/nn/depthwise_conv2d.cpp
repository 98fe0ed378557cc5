#include "mdtrain/nn/depthwise_conv2d.h"

#include <algorithm>

#include "mdtrain/nn/grown_buffer.h"
#include "mdtrain/nn/window_args.h"
#include "mdtrain/ops/conv_ops.h"
#include "mdtrain/ops/depthwise_conv.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

void DepthwiseWindowArgs::check(const char* area, const std::string& layer) {
  MDTRAIN_CHECK(depth_multiplier > 0, std::invalid_argument, "[", area, "] layer \"", layer,
                "\": Invalid value for argument `depth_multiplier`. Expected a strictly positive value. Received "
                "depth_multiplier=",
                depth_multiplier, ".");
  check_tuple_arg(area, layer, "kernel_size", kernel_size, 2);
  check_tuple_arg(area, layer, "strides", strides, 2);
  check_tuple_arg(area, layer, "dilation_rate", dilation_rate, 2);
  padding = check_padding_arg(area, layer, padding);
  check_data_format_arg(area, layer, data_format);
  // TensorFlow's depthwise convolution refuses the pair (Keras passes it on and fails in call).
  const auto max_of = [](const std::vector<std::int64_t>& v) { return *std::max_element(v.begin(), v.end()); };
  MDTRAIN_CHECK(max_of(strides) == 1 || max_of(dilation_rate) == 1, std::invalid_argument, "[", area, "] layer \"",
                layer, "\": `strides > 1` not supported in conjunction with `dilation_rate > 1`. Received: strides=",
                tuple_string(strides), " and dilation_rate=", tuple_string(dilation_rate));
}

Window2D DepthwiseWindowArgs::window_for(const char* area, const std::string& layer, const Shape& input_shape) const {
  check_image_input_shape(area, layer, input_shape);
  const auto& k = kernel_size;
  const auto& d = dilation_rate;
  const Window2D g = ops::make_window2d(input_shape[0], input_shape[1], input_shape[2], k[0], k[1], strides[0],
                                        strides[1], d[0], d[1], padding == "same");
  if (g.out_h == 0 || g.out_w == 0) {
    const std::vector<std::int64_t> extent{math::dilated_extent(k[0], d[0]), math::dilated_extent(k[1], d[1])};
    const std::string dilated =
        extent == k ? std::string()
                    : cat(" (dilated by dilation_rate ", tuple_string(d), " to ", tuple_string(extent), ")");
    fail_window_larger_than_input(area, layer, "kernel_size " + tuple_string(k) + dilated, input_shape);
  }
  return g;
}

void DepthwiseWindowArgs::read_config(const Json& c) {
  kernel_size = pair_from_json(c.at("kernel_size"));
  strides = pair_from_json(c.get("strides", Json(1)));
  padding = c.get("padding", "valid").as_string();
  depth_multiplier = c.get("depth_multiplier", 1).as_int();
  data_format = c.get("data_format", "channels_last").as_string();
  dilation_rate = pair_from_json(c.get("dilation_rate", Json(1)));
}

void DepthwiseWindowArgs::write_config(Json& c) const { c.set("depth_multiplier", depth_multiplier); }

void check_image_layer_input(const char* area, const Layer& layer, const Tensor& x) {
  MDTRAIN_CHECK(layer.built(), std::logic_error, "[layer] layer \"", layer.name(), "\" was called before it was built");
  MDTRAIN_CHECK(x.ndim() == 4, std::invalid_argument, "[", area, "] Input 0 of layer \"", layer.name(),
                "\" is incompatible with the layer: expected ndim=4, found ndim=", x.ndim(),
                ". Full shape received: ", to_string(x.shape()));
  MDTRAIN_CHECK(x.dim(3) == layer.input_shape().back(), std::invalid_argument, "[", area, "] Input 0 of layer \"",
                layer.name(), "\" is incompatible with the layer: expected axis -1 of input shape to have value ",
                layer.input_shape().back(), ", but received input with shape ", to_string(x.shape()));
}

namespace {
constexpr const char* kArea = "depthwise_conv2d";

void write_window_config(Json& c, const DepthwiseWindowArgs& a) {
  c.set("kernel_size", pair_to_json(a.kernel_size));
  c.set("strides", pair_to_json(a.strides));
  c.set("padding", a.padding);
  c.set("data_format", a.data_format);
  c.set("dilation_rate", pair_to_json(a.dilation_rate));
}
}  // namespace

DepthwiseConv2D::DepthwiseConv2D(std::string name, Options options)
    : Layer(std::move(name)), options_(std::move(options)), activation_(parse_activation(options_.activation)) {
  options_.check(kArea, name_);
  make_initializer(options_.depthwise_initializer);
  make_initializer(options_.bias_initializer);
  weights_.kernel_regularizer = make_regularizer(options_.depthwise_regularizer);
  weights_.bias_regularizer = make_regularizer(options_.bias_regularizer);
}

Shape DepthwiseConv2D::compute_output_shape(const Shape& input_shape) const {
  const Window2D g = options_.window_for(kArea, name_, input_shape);
  return {g.out_h, g.out_w, g.channels * options_.depth_multiplier};
}

void DepthwiseConv2D::build_weights(const Shape& input_shape, std::uint64_t seed) {
  window_ = options_.window_for(kArea, name_, input_shape);
  const std::int64_t kh = window_.k_h, kw = window_.k_w, cin = window_.channels, dm = options_.depth_multiplier;
  Rng rng(seed, 0);
  weights_.kernel = Parameter(name_ + "/kernel", Tensor({kh, kw, cin, dm}, dtype_));
  make_initializer(options_.depthwise_initializer)->fill(weights_.kernel.value, kh * kw * cin, kh * kw * dm, rng);
  if (options_.use_bias) {
    weights_.bias = Parameter(name_ + "/bias", Tensor({cin * dm}, dtype_));
    Rng bias_rng(seed, 1);
    make_initializer(options_.bias_initializer)->fill(weights_.bias.value, cin * dm, cin * dm, bias_rng);
  }
}

Tensor DepthwiseConv2D::forward(const Tensor& x, const ForwardContext&) {
  check_image_layer_input(kArea, *this, x);
  check_input(x);
  x_ = x;
  const std::int64_t images = x.dim(0), out_c = window_.channels * options_.depth_multiplier,
                     rows = images * window_.out_h * window_.out_w;
  const bool keep = keeps_preactivation(activation_);
  ensure_buffer(y_, {rows, out_c}, dtype_, x.device());
  if (keep) ensure_buffer(z_, {rows, out_c}, dtype_, x.device());
  Tensor& z = keep ? z_ : y_;
  Tensor z_images = z.reshape(output_dims(images));
  ops::depthwise_conv2d(x, weights_.kernel.value, window_, options_.depth_multiplier, z_images);
  weights_.add_bias_and_activate(z, options_.use_bias, activation_, keep, y_);
  return y_.reshape(output_dims(images));
}

Tensor DepthwiseConv2D::logits() const {
  MDTRAIN_CHECK(keeps_preactivation(activation_), std::logic_error, "[", kArea, "] layer \"", name_,
                "\" keeps no logits for activation ", name_of(activation_));
  return z_.reshape(output_dims(x_.dim(0)));
}

Tensor DepthwiseConv2D::backward(const Tensor& dy, bool need_input_grad) {
  return backward_rows(dy, activation_ != Activation::Linear, need_input_grad);
}

Tensor DepthwiseConv2D::backward_from_logits(const Tensor& dlogits, bool need_input_grad) {
  return backward_rows(dlogits, false, need_input_grad);
}

Tensor DepthwiseConv2D::backward_rows(const Tensor& grad, bool through_activation, bool need_input_grad) {
  const std::int64_t images = x_.dim(0), out_c = window_.channels * options_.depth_multiplier;
  MDTRAIN_CHECK(grad.numel() == y_.numel(), std::invalid_argument, "[", kArea, "] layer \"", name_,
                "\": the output gradient has shape ", to_string(grad.shape()), ", the last forward produced ",
                to_string(output_dims(images)));
  Tensor dz = grad.reshape({-1, out_c});
  if (through_activation) {
    ensure_buffer(dz_, y_.shape(), dtype_, x_.device());
    const bool keep = keeps_preactivation(activation_);
    ops::activation_backward(activation_, keep ? z_ : Tensor(), y_, dz, dz_);
    dz = dz_;
  }
  if (options_.use_bias) ops::sum_rows(dz, weights_.bias.grad);
  const Tensor dz_images = dz.reshape(output_dims(images));
  ops::depthwise_conv2d_kernel_grad(x_, dz_images, window_, options_.depth_multiplier, weights_.kernel.grad);
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, x_.shape(), dtype_, x_.device());
  ops::depthwise_conv2d_input_grad(dz_images, weights_.kernel.value, window_, options_.depth_multiplier, dx_);
  return dx_;
}

std::unique_ptr<Layer> DepthwiseConv2D::clone() const {
  auto copy = std::make_unique<DepthwiseConv2D>(name_, options_);
  copy->copy_build_state(*this);
  copy->window_ = window_;
  copy->weights_.copy_values_from(weights_, built_, options_.use_bias);
  return copy;
}

Json DepthwiseConv2D::config() const {
  Json c = Layer::config();
  options_.write_config(c);
  write_window_config(c, options_);
  c.set("activation", name_of(activation_));
  c.set("use_bias", options_.use_bias);
  c.set("depthwise_initializer", make_initializer(options_.depthwise_initializer)->config());
  c.set("bias_initializer", make_initializer(options_.bias_initializer)->config());
  c.set("depthwise_regularizer", weights_.kernel_regularizer ? weights_.kernel_regularizer->config() : Json());
  c.set("bias_regularizer", weights_.bias_regularizer ? weights_.bias_regularizer->config() : Json());
  c.set("activity_regularizer", Json());
  c.set("depthwise_constraint", Json());
  c.set("bias_constraint", Json());
  return c;
}

std::unique_ptr<Layer> DepthwiseConv2D::from_config(const Json& c) {
  Options o;
  o.read_config(c);
  o.activation = c.get("activation", "linear").as_string();
  o.use_bias = c.get("use_bias", true).as_bool();
  o.depthwise_initializer = c.get("depthwise_initializer", "glorot_uniform");
  o.bias_initializer = c.get("bias_initializer", "zeros");
  o.depthwise_regularizer = c.get("depthwise_regularizer", Json());
  o.bias_regularizer = c.get("bias_regularizer", Json());
  return std::make_unique<DepthwiseConv2D>(c.at("name").as_string(), o);
}

}  // namespace mdtrain
