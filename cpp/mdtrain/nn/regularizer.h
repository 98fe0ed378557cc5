#pragma once
#include <memory>

#include "mdtrain/core/json.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain {

// Keras's L1 / L2 / L1L2 weight penalties: l1 * sum|w| + l2 * sum w^2, added to the loss once per
// step (not per example, not per replica).
class Regularizer {
 public:
  Regularizer(double l1, double l2) : l1_(l1), l2_(l2) {}
  double loss(const Tensor& w) const;
  void add_gradient(const Tensor& w, Tensor& grad) const;
  Json config() const;

 private:
  double l1_, l2_;
};

// null → no regularizer; "l1", "l2", "l1_l2" (Keras's default factor 0.01), or
// {"class_name": "L2", "config": {"l2": 0.001}}.
std::unique_ptr<Regularizer> make_regularizer(const Json& spec);

}  // namespace mdtrain
