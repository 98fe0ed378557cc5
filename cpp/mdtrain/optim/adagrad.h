#pragma once
// keras.optimizers.Adagrad: acc starts at initial_accumulator_value;
//   acc += g^2;  p -= lr * g / sqrt(acc + epsilon)
#include "mdtrain/optim/optimizer.h"

namespace mdtrain {

class Adagrad : public Optimizer {
 public:
  // Keras defaults; initial_accumulator_value and epsilon must be >= 0.
  explicit Adagrad(LearningRate learning_rate = 0.001, double initial_accumulator_value = 0.1, double epsilon = 1e-7,
                   OptimizerOptions options = {});
  static std::unique_ptr<Adagrad> from_config(const Json& config);

  const char* class_name() const override { return "Adagrad"; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<Adagrad>(*this); }
  Json config() const override;

  double initial_accumulator_value() const { return initial_accumulator_value_; }
  double epsilon() const { return epsilon_; }

 protected:
  std::vector<SlotSpec> slot_specs() const override;
  void update(const StepUpdate& step) override;

 private:
  double initial_accumulator_value_, epsilon_;
};

}  // namespace mdtrain
