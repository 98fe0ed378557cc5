#include "mdtrain/optim/adagrad.h"

#include <cmath>

#include "mdtrain/ops/optimizer_ops.h"

namespace mdtrain {

Adagrad::Adagrad(LearningRate learning_rate, double initial_accumulator_value, double epsilon, OptimizerOptions options)
    : Optimizer(std::move(learning_rate), std::move(options), "adagrad"),
      initial_accumulator_value_(initial_accumulator_value),
      epsilon_(epsilon) {
  check_range(initial_accumulator_value, 0.0, HUGE_VAL, false, "initial_accumulator_value");
  check_range(epsilon, 0.0, HUGE_VAL, false, "epsilon");
}

std::unique_ptr<Adagrad> Adagrad::from_config(const Json& config) {
  ConfigReader r(config, "Adagrad");
  LearningRate lr = r.learning_rate(0.001);
  OptimizerOptions base = r.base_options();
  double initial = r.number("initial_accumulator_value", 0.1), epsilon = r.number("epsilon", 1e-7);
  r.finish();
  return std::make_unique<Adagrad>(std::move(lr), initial, epsilon, std::move(base));
}

Json Adagrad::config() const {
  Json c = Optimizer::config();
  c.set("initial_accumulator_value", initial_accumulator_value_);
  c.set("epsilon", epsilon_);
  return c;
}

std::vector<Optimizer::SlotSpec> Adagrad::slot_specs() const { return {{"accumulator", initial_accumulator_value_}}; }

void Adagrad::update(const StepUpdate& u) {
  ops::adagrad_update(u.device, u.dtype, u.segments, u.learning_rate, epsilon_, u.clip_value);
}

}  // namespace mdtrain
