#pragma once
// keras.optimizers.AdamW: Adam with decoupled weight decay, which Keras's base optimizer applies
// before the Adam step: p -= p * weight_decay * lr (then the Adam update of adam.h).
#include "mdtrain/optim/adam.h"

namespace mdtrain {

class AdamW : public Adam {
 public:
  // Keras defaults. options.weight_decay is ignored: the weight_decay argument wins.
  explicit AdamW(LearningRate learning_rate = 0.001, double weight_decay = 0.004, double beta_1 = 0.9,
                 double beta_2 = 0.999, double epsilon = 1e-7, bool amsgrad = false, OptimizerOptions options = {});
  static std::unique_ptr<AdamW> from_config(const Json& config);

  const char* class_name() const override { return "AdamW"; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<AdamW>(*this); }
};

}  // namespace mdtrain
