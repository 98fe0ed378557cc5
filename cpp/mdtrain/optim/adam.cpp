#include "mdtrain/optim/adam.h"

#include <cmath>

#include "mdtrain/ops/optimizer_ops.h"

namespace mdtrain {

Adam::Adam(LearningRate learning_rate, double beta_1, double beta_2, double epsilon, bool amsgrad,
           OptimizerOptions options)
    : Adam(std::move(learning_rate), beta_1, beta_2, epsilon, amsgrad, std::move(options), "adam") {}

Adam::Adam(LearningRate learning_rate, double beta_1, double beta_2, double epsilon, bool amsgrad,
           OptimizerOptions options, const char* default_name)
    : Optimizer(std::move(learning_rate), std::move(options), default_name),
      beta_1_(beta_1),
      beta_2_(beta_2),
      epsilon_(epsilon),
      amsgrad_(amsgrad) {
  check_range(beta_1, 0.0, 1.0, false, "beta_1");
  check_range(beta_2, 0.0, 1.0, false, "beta_2");
  check_range(epsilon, 0.0, HUGE_VAL, false, "epsilon");
}

std::unique_ptr<Adam> Adam::from_config(const Json& config) {
  ConfigReader r(config, "Adam");
  LearningRate lr = r.learning_rate(0.001);
  OptimizerOptions base = r.base_options();
  double beta_1 = r.number("beta_1", 0.9), beta_2 = r.number("beta_2", 0.999), epsilon = r.number("epsilon", 1e-7);
  bool amsgrad = r.boolean("amsgrad", false);
  r.finish();
  return std::make_unique<Adam>(std::move(lr), beta_1, beta_2, epsilon, amsgrad, std::move(base));
}

Json Adam::config() const {
  Json c = Optimizer::config();
  c.set("beta_1", beta_1_);
  c.set("beta_2", beta_2_);
  c.set("epsilon", epsilon_);
  c.set("amsgrad", amsgrad_);
  return c;
}

std::vector<Optimizer::SlotSpec> Adam::slot_specs() const {
  if (amsgrad_) return {{"momentum", 0.0}, {"velocity", 0.0}, {"velocity_hat", 0.0}};
  return {{"momentum", 0.0}, {"velocity", 0.0}};
}

double Adam::step_size(double learning_rate, std::int64_t iterations) const {
  const double t = static_cast<double>(iterations + 1);
  return learning_rate * std::sqrt(1 - std::pow(beta_2_, t)) / (1 - std::pow(beta_1_, t));
}

void Adam::update(const StepUpdate& u) {
  ops::adam_update(u.device, u.dtype, u.segments, step_size(u.learning_rate, u.iterations), beta_1_, beta_2_, epsilon_,
                   amsgrad_, u.clip_value);
}

}  // namespace mdtrain
