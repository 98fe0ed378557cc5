#include "mdtrain/nn/flatten.h"

namespace mdtrain {

Tensor Flatten::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  last_input_shape_ = x.shape();
  return x.reshape({x.dim(0), output_shape_[0]});
}

Tensor Flatten::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  return dy.reshape(last_input_shape_);
}

std::unique_ptr<Layer> Flatten::clone() const {
  auto copy = std::make_unique<Flatten>(name_);
  copy->copy_build_state(*this);
  return copy;
}

std::unique_ptr<Layer> Flatten::from_config(const Json& c) {
  return std::make_unique<Flatten>(c.at("name").as_string());
}

}  // namespace mdtrain
