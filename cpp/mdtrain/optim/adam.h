#pragma once
// keras.optimizers.Adam. With t = iterations + 1:
//   alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
//   m += (g - m) * (1 - beta_1);  v += (g^2 - v) * (1 - beta_2)
//   amsgrad: v_hat = max(v_hat, v), used in place of v
//   p -= alpha * m / (sqrt(v) + epsilon)
#include "mdtrain/optim/optimizer.h"

namespace mdtrain {

class Adam : public Optimizer {
 public:
  // Keras defaults; beta_1 and beta_2 must lie in [0, 1), epsilon >= 0.
  explicit Adam(LearningRate learning_rate = 0.001, double beta_1 = 0.9, double beta_2 = 0.999, double epsilon = 1e-7,
                bool amsgrad = false, OptimizerOptions options = {});
  static std::unique_ptr<Adam> from_config(const Json& config);

  const char* class_name() const override { return "Adam"; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<Adam>(*this); }
  Json config() const override;

  double beta_1() const { return beta_1_; }
  double beta_2() const { return beta_2_; }
  double epsilon() const { return epsilon_; }
  bool amsgrad() const { return amsgrad_; }

 protected:
  Adam(LearningRate learning_rate, double beta_1, double beta_2, double epsilon, bool amsgrad, OptimizerOptions options,
       const char* default_name);
  std::vector<SlotSpec> slot_specs() const override;
  void update(const StepUpdate& step) override;

 private:
  // alpha of a step: lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), t = iterations + 1.
  double step_size(double learning_rate, std::int64_t iterations) const;

  double beta_1_, beta_2_, epsilon_;
  bool amsgrad_;
};

}  // namespace mdtrain
