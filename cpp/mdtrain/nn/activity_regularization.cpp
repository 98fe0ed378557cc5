#include "mdtrain/nn/activity_regularization.h"

#include <cmath>

#include "mdtrain/ops/noise.h"

namespace mdtrain {

namespace {

// Keras's validate_float_arg: a finite number >= 0.
void check_factor(const std::string& layer, const char* name, double v) {
  MDTRAIN_CHECK(std::isfinite(v) && v >= 0.0, std::invalid_argument, "[layers] ActivityRegularization layer \"", layer,
                "\": Invalid value for argument ", name, ": expected a non-negative float. Received: ", name, "=", v);
}

}  // namespace

ActivityRegularization::ActivityRegularization(std::string name, double l1, double l2)
    : Layer(std::move(name)), l1_(l1), l2_(l2) {
  check_factor(name_, "l1", l1);
  check_factor(name_, "l2", l2);
}

Tensor ActivityRegularization::forward(const Tensor& x, const ForwardContext& ctx) {
  check_input(x);
  x_ = x;
  penalty_ = adds_activity_loss() ? ops::activity_penalty(x, l1_, l2_) : 0.0;
  if (ctx.training && adds_activity_loss()) {
    MDTRAIN_CHECK(ctx.global_rows > 0, std::invalid_argument, "[layers] ActivityRegularization layer \"", name_,
                  "\": its penalty is a loss term of fit and evaluate steps (OneDevice, Mirrored, MultiWorkerMirrored "
                  "and CentralStorage strategies); this training call gives no batch to divide it by, so it would be "
                  "lost (custom training loops do not collect it yet)");
    scale_ = 1.0 / static_cast<double>(ctx.global_rows);
  }
  return x;
}

Tensor ActivityRegularization::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  if (!adds_activity_loss()) return dy;
  ensure_buffer(dx_, x_.shape(), dtype_, x_.device());
  ops::activity_penalty_backward(x_, dy.reshape(x_.shape()), l1_, l2_, scale_, dx_);
  return dx_;
}

std::unique_ptr<Layer> ActivityRegularization::clone() const {
  auto copy = std::make_unique<ActivityRegularization>(name_, l1_, l2_);
  copy->copy_build_state(*this);
  return copy;
}

Json ActivityRegularization::config() const {
  Json c = Layer::config();
  c.set("l1", l1_);
  c.set("l2", l2_);
  return c;
}

std::unique_ptr<Layer> ActivityRegularization::from_config(const Json& c) {
  // Keras's L1L2 reads None as 0.
  const auto factor = [&](const char* key) { return c.get(key, Json(0.0)).as_number(); };
  return std::make_unique<ActivityRegularization>(c.at("name").as_string(), factor("l1"), factor("l2"));
}

}  // namespace mdtrain
