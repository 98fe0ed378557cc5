#include "mdtrain/nn/layer_normalization.h"

#include <cmath>

#include "mdtrain/nn/batch_normalization.h"  // normalization_axis_from_json, check_last_axis_input
#include "mdtrain/nn/initializer.h"
#include "mdtrain/ops/normalization.h"

namespace mdtrain {

LayerNormalization::LayerNormalization(std::string name, Options options)
    : Layer(std::move(name)), options_(std::move(options)) {
  MDTRAIN_CHECK(options_.axis == -1 || options_.axis >= 1, std::invalid_argument, "[layer_normalization] layer \"",
                name_, "\": only axis=-1 (the last axis, or its index) is supported, got axis=", options_.axis);
  MDTRAIN_CHECK(options_.epsilon >= 0.0 && std::isfinite(options_.epsilon), std::invalid_argument,
                "[layer_normalization] layer \"", name_, "\": epsilon must be a finite number >= 0, got ",
                options_.epsilon);
  make_initializer(options_.beta_initializer);
  make_initializer(options_.gamma_initializer);
  gamma_beta_.beta_regularizer = make_regularizer(options_.beta_regularizer);
  gamma_beta_.gamma_regularizer = make_regularizer(options_.gamma_regularizer);
}

Shape LayerNormalization::compute_output_shape(const Shape& input_shape) const {
  check_last_axis_input("layer_normalization", name_, options_.axis, input_shape, "features", "the last axis");
  require_known_dim(input_shape, -1, "gamma and beta");
  return input_shape;
}

void LayerNormalization::build_weights(const Shape& input_shape, std::uint64_t seed) {
  features_ = input_shape.back();
  gamma_beta_.build(name_, features_, dtype_, seed, options_.scale, options_.center, options_.gamma_initializer,
                    options_.beta_initializer);
}

Tensor LayerNormalization::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  last_input_shape_ = x.shape();
  const Tensor x2d = x.reshape({-1, features_});
  const std::int64_t rows = x2d.dim(0);
  // Every buffer on the input's device: a GPU replica's forward runs there entirely.
  ensure_buffer(xhat_, x2d.shape(), dtype_, x.device());
  ensure_buffer(y_, x2d.shape(), dtype_, x.device());
  ensure_buffer(inv_std_, {rows}, DType::Float64, x.device());
  ops::row_normalize(x2d, options_.epsilon, gamma_beta_.gamma_or_none(options_.scale),
                     gamma_beta_.beta_or_none(options_.center), xhat_, inv_std_, y_);
  return y_.reshape(last_input_shape_);
}

Tensor LayerNormalization::backward(const Tensor& dy, bool need_input_grad) {
  const Tensor dy2 = dy.reshape({-1, features_});
  MDTRAIN_CHECK(dy2.shape() == xhat_.shape(), std::logic_error, "[layer_normalization] layer \"", name_,
                "\": backward got dy of shape ", to_string(dy.shape()), " for a forward on ",
                to_string(last_input_shape_));
  if (options_.scale || options_.center) {
    ensure_buffer(sum_dy_, {features_}, DType::Float64, dy.device());
    ensure_buffer(sum_dy_xhat_, {features_}, DType::Float64, dy.device());
    ops::channel_grad_sums(dy2, xhat_, sum_dy_, sum_dy_xhat_);
    gamma_beta_.store_gradients(sum_dy_, sum_dy_xhat_, options_.scale, options_.center);
  }
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, dy2.shape(), dtype_, dy.device());
  ops::row_normalize_backward(dy2, xhat_, inv_std_, gamma_beta_.gamma_or_none(options_.scale), dx_);
  return dx_.reshape(last_input_shape_);
}

std::vector<Parameter*> LayerNormalization::parameters() {
  return gamma_beta_.parameters(built_, options_.scale, options_.center);
}

double LayerNormalization::regularization_loss() const {
  return gamma_beta_.regularization_loss(built_, options_.scale, options_.center);
}

void LayerNormalization::add_regularization_gradients() {
  gamma_beta_.add_regularization_gradients(options_.scale, options_.center);
}

std::unique_ptr<Layer> LayerNormalization::clone() const {
  auto copy = std::make_unique<LayerNormalization>(name_, options_);
  copy->copy_build_state(*this);
  if (built_) copy->features_ = features_;
  copy->gamma_beta_.copy_values_from(gamma_beta_, built_, options_.scale, options_.center);
  return copy;
}

Json LayerNormalization::config() const {
  Json c = Layer::config();
  c.set("axis", options_.axis);
  c.set("epsilon", options_.epsilon);
  c.set("center", options_.center);
  c.set("scale", options_.scale);
  c.set("rms_scaling", false);
  c.set("beta_initializer", make_initializer(options_.beta_initializer)->config());
  c.set("gamma_initializer", make_initializer(options_.gamma_initializer)->config());
  c.set("beta_regularizer", gamma_beta_.beta_regularizer ? gamma_beta_.beta_regularizer->config() : Json());
  c.set("gamma_regularizer", gamma_beta_.gamma_regularizer ? gamma_beta_.gamma_regularizer->config() : Json());
  c.set("beta_constraint", Json());
  c.set("gamma_constraint", Json());
  return c;
}

std::unique_ptr<Layer> LayerNormalization::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  MDTRAIN_CHECK(!c.get("rms_scaling", false).as_bool(), std::invalid_argument, "[layers] layer \"", name,
                "\": LayerNormalization(rms_scaling=True) is not supported");
  LayerNormalization::Options o;
  o.axis = normalization_axis_from_json(name, c.get("axis", Json(-1)));
  o.epsilon = c.get("epsilon", 1e-3).as_number();
  read_gamma_beta_config(c, o);
  return std::make_unique<LayerNormalization>(name, o);
}

}  // namespace mdtrain
