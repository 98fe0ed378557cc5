#include "mdtrain/optim/sgd.h"

#include "mdtrain/ops/optimizer_ops.h"

namespace mdtrain {

SGD::SGD(LearningRate learning_rate, double momentum, bool nesterov, OptimizerOptions options)
    : Optimizer(std::move(learning_rate), std::move(options), "SGD"), momentum_(momentum), nesterov_(nesterov) {
  check_range(momentum, 0.0, 1.0, true, "SGD momentum");
}

std::unique_ptr<SGD> SGD::from_config(const Json& config) {
  ConfigReader r(config, "SGD");
  LearningRate lr = r.learning_rate(0.01);
  OptimizerOptions base = r.base_options();
  double momentum = r.number("momentum", 0.0);
  bool nesterov = r.boolean("nesterov", false);
  r.finish();
  return std::make_unique<SGD>(std::move(lr), momentum, nesterov, std::move(base));
}

Json SGD::config() const {
  Json c = Optimizer::config();
  c.set("momentum", momentum_);
  c.set("nesterov", nesterov_);
  return c;
}

std::vector<Optimizer::SlotSpec> SGD::slot_specs() const {
  if (momentum_ == 0.0) return {};
  return {{"momentum", 0.0}};
}

void SGD::update(const StepUpdate& u) {
  ops::sgd_update(u.device, u.dtype, u.segments, u.learning_rate, momentum_, nesterov_, u.clip_value);
}

}  // namespace mdtrain
