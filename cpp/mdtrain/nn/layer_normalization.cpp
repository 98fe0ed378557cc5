#include "mdtrain/nn/layer_normalization.h"

#include <cmath>

#include "mdtrain/nn/batch_normalization.h"  // normalization_axis_from_json
#include "mdtrain/nn/initializer.h"
#include "mdtrain/ops/normalization.h"

namespace mdtrain {

namespace {
// dst (float32 or float64) = src (float64), element for element.
void store(const Tensor& src, Tensor& dst) {
  const double* s = src.data<double>();
  if (dst.dtype() == DType::Float32) {
    float* d = dst.data<float>();
    for (std::int64_t i = 0; i < dst.numel(); ++i) d[i] = static_cast<float>(s[i]);
  } else {
    double* d = dst.data<double>();
    for (std::int64_t i = 0; i < dst.numel(); ++i) d[i] = s[i];
  }
}
}  // namespace

LayerNormalization::LayerNormalization(std::string name, Options options)
    : Layer(std::move(name)), options_(std::move(options)) {
  MDTRAIN_CHECK(options_.axis == -1 || options_.axis >= 1, std::invalid_argument, "[layer_normalization] layer \"",
                name_, "\": only axis=-1 (the last axis, or its index) is supported, got axis=", options_.axis);
  MDTRAIN_CHECK(options_.epsilon >= 0.0 && std::isfinite(options_.epsilon), std::invalid_argument,
                "[layer_normalization] layer \"", name_, "\": epsilon must be a finite number >= 0, got ",
                options_.epsilon);
  make_initializer(options_.beta_initializer);
  make_initializer(options_.gamma_initializer);
  beta_regularizer_ = make_regularizer(options_.beta_regularizer);
  gamma_regularizer_ = make_regularizer(options_.gamma_regularizer);
}

Shape LayerNormalization::compute_output_shape(const Shape& input_shape) const {
  MDTRAIN_CHECK(!input_shape.empty(), std::invalid_argument, "[layer_normalization] layer \"", name_,
                "\" needs inputs of rank >= 2 (batch, ..., features), got input shape (None,)");
  const auto last = static_cast<std::int64_t>(input_shape.size());
  if (options_.axis != -1 && options_.axis != last) {
    Shape full{-1};
    full.insert(full.end(), input_shape.begin(), input_shape.end());
    fail<std::invalid_argument>("[layer_normalization] layer \"", name_,
                                "\": only axis=-1 (the last axis: axis=", last, " for inputs of shape ",
                                to_string(full), ") is supported, got axis=", options_.axis);
  }
  return input_shape;
}

void LayerNormalization::build_weights(const Shape& input_shape, std::uint64_t seed) {
  features_ = input_shape.back();
  const std::int64_t d = features_;
  if (options_.scale) {
    gamma_ = Parameter(name_ + "/gamma", Tensor({d}, dtype_));
    Rng rng(seed, 0);
    make_initializer(options_.gamma_initializer)->fill(gamma_.value, d, d, rng);
  }
  if (options_.center) {
    beta_ = Parameter(name_ + "/beta", Tensor({d}, dtype_));
    Rng rng(seed, 1);
    make_initializer(options_.beta_initializer)->fill(beta_.value, d, d, rng);
  }
}

Tensor LayerNormalization::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  last_input_shape_ = x.shape();
  const Tensor x2d = x.reshape({-1, features_});
  const std::int64_t rows = x2d.dim(0);
  ensure_buffer(xhat_, x2d.shape(), dtype_);
  ensure_buffer(y_, x2d.shape(), dtype_);
  ensure_buffer(inv_std_, {rows}, DType::Float64);
  ops::row_normalize(x2d, options_.epsilon, options_.scale ? gamma_.value : Tensor(),
                     options_.center ? beta_.value : Tensor(), xhat_, inv_std_, y_);
  return y_.reshape(last_input_shape_);
}

Tensor LayerNormalization::backward(const Tensor& dy, bool need_input_grad) {
  const Tensor dy2 = dy.reshape({-1, features_});
  MDTRAIN_CHECK(dy2.shape() == xhat_.shape(), std::logic_error, "[layer_normalization] layer \"", name_,
                "\": backward got dy of shape ", to_string(dy.shape()), " for a forward on ",
                to_string(last_input_shape_));
  if (options_.scale || options_.center) {
    ensure_buffer(sum_dy_, {features_}, DType::Float64);
    ensure_buffer(sum_dy_xhat_, {features_}, DType::Float64);
    ops::channel_grad_sums(dy2, xhat_, sum_dy_, sum_dy_xhat_);
    if (options_.scale) store(sum_dy_xhat_, gamma_.grad);
    if (options_.center) store(sum_dy_, beta_.grad);
  }
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, dy2.shape(), dtype_);
  ops::row_normalize_backward(dy2, xhat_, inv_std_, options_.scale ? gamma_.value : Tensor(), dx_);
  return dx_.reshape(last_input_shape_);
}

std::vector<Parameter*> LayerNormalization::parameters() {
  if (!built_) return {};
  std::vector<Parameter*> out;
  if (options_.scale) out.push_back(&gamma_);
  if (options_.center) out.push_back(&beta_);
  return out;
}

double LayerNormalization::regularization_loss() const {
  double l = 0;
  if (gamma_regularizer_ && built_ && options_.scale) l += gamma_regularizer_->loss(gamma_.value);
  if (beta_regularizer_ && built_ && options_.center) l += beta_regularizer_->loss(beta_.value);
  return l;
}

void LayerNormalization::add_regularization_gradients() {
  if (gamma_regularizer_ && options_.scale) gamma_regularizer_->add_gradient(gamma_.value, gamma_.grad);
  if (beta_regularizer_ && options_.center) beta_regularizer_->add_gradient(beta_.value, beta_.grad);
}

std::unique_ptr<Layer> LayerNormalization::clone() const {
  auto copy = std::make_unique<LayerNormalization>(name_, options_);
  copy->copy_build_state(*this);
  if (built_) {
    copy->features_ = features_;
    if (options_.scale) copy->gamma_ = Parameter(gamma_.name, gamma_.value.clone());
    if (options_.center) copy->beta_ = Parameter(beta_.name, beta_.value.clone());
  }
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
  c.set("beta_regularizer", beta_regularizer_ ? beta_regularizer_->config() : Json());
  c.set("gamma_regularizer", gamma_regularizer_ ? gamma_regularizer_->config() : Json());
  c.set("beta_constraint", Json());
  c.set("gamma_constraint", Json());
  return c;
}

std::unique_ptr<Layer> layer_normalization_from_config(const std::string& name, const Json& c) {
  MDTRAIN_CHECK(!c.get("rms_scaling", false).as_bool(), std::invalid_argument, "[layers] layer \"", name,
                "\": LayerNormalization(rms_scaling=True) is not supported");
  LayerNormalization::Options o;
  o.axis = normalization_axis_from_json(name, c.get("axis", Json(-1)));
  o.epsilon = c.get("epsilon", 1e-3).as_number();
  o.center = c.get("center", true).as_bool();
  o.scale = c.get("scale", true).as_bool();
  o.beta_initializer = c.get("beta_initializer", "zeros");
  o.gamma_initializer = c.get("gamma_initializer", "ones");
  o.beta_regularizer = c.get("beta_regularizer", Json());
  o.gamma_regularizer = c.get("gamma_regularizer", Json());
  return std::make_unique<LayerNormalization>(name, o);
}

}  // namespace mdtrain
