#include "mdtrain/nn/unit_normalization.h"

#include "mdtrain/ops/over_axes.h"

namespace mdtrain {

UnitNormalization::UnitNormalization(std::string name, LayerAxes axes)
    : Layer(std::move(name)), given_(std::move(axes)) {}

Shape UnitNormalization::compute_output_shape(const Shape& input_shape) const {
  given_.resolve("unit_normalization", name_, input_shape);
  return input_shape;
}

void UnitNormalization::build_weights(const Shape& input_shape, std::uint64_t) {
  axes_ = given_.resolve("unit_normalization", name_, input_shape);
}

Tensor UnitNormalization::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  x_ = x;
  ensure_buffer(y_, x.shape(), dtype_, x.device());
  ops::unit_normalize(x, axes_, y_);
  return y_;
}

Tensor UnitNormalization::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, x_.shape(), dtype_, x_.device());
  ops::unit_normalize_backward(x_, dy.reshape(x_.shape()), axes_, dx_);
  return dx_;
}

Layer::TensorParallelForm UnitNormalization::tensor_parallel_form() const {
  if (!built_) return TensorParallelForm::None;
  return LayerAxes::holds_last(axes_, input_shape_) ? TensorParallelForm::None : TensorParallelForm::Elementwise;
}

std::unique_ptr<Layer> UnitNormalization::clone() const {
  auto copy = std::make_unique<UnitNormalization>(name_, given_);
  copy->copy_build_state(*this);
  copy->axes_ = axes_;
  return copy;
}

Json UnitNormalization::config() const {
  Json c = Layer::config();
  c.set("axis", given_.to_json());
  return c;
}

std::unique_ptr<Layer> UnitNormalization::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  return std::make_unique<UnitNormalization>(name,
                                             LayerAxes::from_json("unit_normalization", name, c.get("axis", Json(-1))));
}

}  // namespace mdtrain
