#include "mdtrain/optim/adamw.h"

namespace mdtrain {

namespace {
OptimizerOptions with_weight_decay(OptimizerOptions options, double weight_decay) {
  options.weight_decay = weight_decay;
  return options;
}
}  // namespace

AdamW::AdamW(LearningRate learning_rate, double weight_decay, double beta_1, double beta_2, double epsilon,
             bool amsgrad, OptimizerOptions options)
    : Adam(std::move(learning_rate), beta_1, beta_2, epsilon, amsgrad,
           with_weight_decay(std::move(options), weight_decay), "adamw") {}

std::unique_ptr<AdamW> AdamW::from_config(const Json& config) {
  ConfigReader r(config, "AdamW");
  LearningRate lr = r.learning_rate(0.001);
  OptimizerOptions base = r.base_options();
  // Keras raises when AdamW gets weight_decay=None; an absent key means the default.
  const Json* wd = config.contains("weight_decay") ? &config.at("weight_decay") : nullptr;
  MDTRAIN_CHECK(!wd || !wd->is_null(), std::invalid_argument,
                "[optim] AdamW: argument weight_decay must be a float, got None");
  double weight_decay = base.weight_decay.value_or(0.004);
  double beta_1 = r.number("beta_1", 0.9), beta_2 = r.number("beta_2", 0.999), epsilon = r.number("epsilon", 1e-7);
  bool amsgrad = r.boolean("amsgrad", false);
  r.finish();
  return std::make_unique<AdamW>(std::move(lr), weight_decay, beta_1, beta_2, epsilon, amsgrad, std::move(base));
}

}  // namespace mdtrain
