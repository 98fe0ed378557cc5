#include "mdtrain/optim/rmsprop.h"

#include <cmath>

#include "mdtrain/ops/optimizer_ops.h"

namespace mdtrain {

RMSprop::RMSprop(LearningRate learning_rate, double rho, double momentum, double epsilon, bool centered,
                 OptimizerOptions options)
    : Optimizer(std::move(learning_rate), std::move(options), "rmsprop"),
      rho_(rho),
      momentum_(momentum),
      epsilon_(epsilon),
      centered_(centered) {
  check_range(rho, 0.0, 1.0, false, "RMSprop rho");
  check_range(momentum, 0.0, 1.0, true, "RMSprop momentum");
  check_range(epsilon, 0.0, HUGE_VAL, false, "epsilon");
}

std::unique_ptr<RMSprop> RMSprop::from_config(const Json& config) {
  ConfigReader r(config, "RMSprop");
  LearningRate lr = r.learning_rate(0.001);
  OptimizerOptions base = r.base_options();
  double rho = r.number("rho", 0.9), momentum = r.number("momentum", 0.0), epsilon = r.number("epsilon", 1e-7);
  bool centered = r.boolean("centered", false);
  r.finish();
  return std::make_unique<RMSprop>(std::move(lr), rho, momentum, epsilon, centered, std::move(base));
}

Json RMSprop::config() const {
  Json c = Optimizer::config();
  c.set("rho", rho_);
  c.set("momentum", momentum_);
  c.set("epsilon", epsilon_);
  c.set("centered", centered_);
  return c;
}

std::vector<Optimizer::SlotSpec> RMSprop::slot_specs() const {
  // Keras's order: velocities, momentums (momentum > 0 only), average gradients (centered only).
  std::vector<SlotSpec> specs{{"velocity", 0.0}};
  if (momentum_ > 0) specs.push_back({"momentum", 0.0});
  if (centered_) specs.push_back({"average_gradient", 0.0});
  return specs;
}

void RMSprop::update(const StepUpdate& u) {
  ops::rmsprop_update(u.device, u.dtype, u.segments, u.learning_rate, rho_, momentum_, epsilon_, centered_,
                      u.clip_value);
}

}  // namespace mdtrain
