#pragma once
// keras.optimizers.SGD: gradient descent with optional (Nesterov) momentum.
//   momentum == 0:  p -= lr * g
//   momentum > 0:   m = momentum * m - lr * g;  p += m   (Nesterov: p += momentum * m - lr * g)
#include "mdtrain/optim/optimizer.h"

namespace mdtrain {

class SGD : public Optimizer {
 public:
  // Keras defaults; momentum must lie in [0, 1].
  explicit SGD(LearningRate learning_rate = 0.01, double momentum = 0.0, bool nesterov = false,
               OptimizerOptions options = {});
  static std::unique_ptr<SGD> from_config(const Json& config);

  const char* class_name() const override { return "SGD"; }
  std::unique_ptr<Optimizer> clone() const override { return std::make_unique<SGD>(*this); }
  Json config() const override;

  double momentum() const { return momentum_; }
  bool nesterov() const { return nesterov_; }

 protected:
  std::vector<SlotSpec> slot_specs() const override;
  void update(const StepUpdate& step) override;

 private:
  double momentum_;
  bool nesterov_;
};

}  // namespace mdtrain
