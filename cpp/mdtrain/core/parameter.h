#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/errors.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain {

// A trainable variable: its value and the gradient of the loss with respect to it. Layers own
// their Parameters; optimizers and gradient reducers see only a list of them, never a layer.
struct Parameter {
  std::string name;  // "dense/kernel", unique within a model
  Tensor value;
  Tensor grad;  // same shape and dtype as value; written by backward()
  bool trainable = true;

  Parameter() = default;
  Parameter(std::string n, Tensor v)
      : name(std::move(n)), value(std::move(v)), grad(Tensor::zeros(value.shape(), value.dtype(), value.device())) {}
};

using ParameterList = std::vector<Parameter*>;

// Copies the values of every weight of `from` into `to` (the same weights, in the same order: a
// stage's or a copy's weights and the model's).
inline void copy_parameter_values(const ParameterList& from, const ParameterList& to) {
  MDTRAIN_CHECK(from.size() == to.size(), std::logic_error, "[core] ", to.size(), " weights cannot take the values of ",
                from.size());
  for (std::size_t k = 0; k < from.size(); ++k) to[k]->value.copy_from(from[k]->value);
}

}  // namespace mdtrain
