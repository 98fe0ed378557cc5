#pragma once
// keras.optimizers.RMSprop. Epsilon is added inside the square root:
//   v = rho * v + (1 - rho) * g^2
//   centered: a = rho * a + (1 - rho) * g;  increment = lr * g / sqrt(v - a^2 + eps)
//   otherwise:                              increment = lr * g / sqrt(v + eps)
//   momentum > 0: mom = momentum * mom + increment;  p -= mom     else p -= increment
#include "mdtrain/optim/optimizer.h"

namespace mdtrain {

class RMSprop : public Optimizer {
 public:
  // Keras defaults; rho must lie in [0, 1), momentum in [0, 1], epsilon >= 0.
  explicit RMSprop(LearningRate learning_rate = 0.001, double rho = 0.9, double momentum = 0.0, double epsilon = 1e-7,
                   bool centered = false, OptimizerOptions options = {});
  static std::unique_ptr<RMSprop> from_config(const Json& config);

  const char* class_name() const override { return "RMSprop"; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<RMSprop>(*this); }
  Json config() const override;

  double rho() const { return rho_; }
  double momentum() const { return momentum_; }
  double epsilon() const { return epsilon_; }
  bool centered() const { return centered_; }

 protected:
  std::vector<SlotSpec> slot_specs() const override;
  void update(const StepUpdate& step) override;

 private:
  double rho_, momentum_, epsilon_;
  bool centered_;
};

}  // namespace mdtrain
