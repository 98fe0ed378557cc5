#include "mdtrain/nn/softmax_layer.h"

#include "mdtrain/ops/ops.h"
#include "mdtrain/ops/over_axes.h"

namespace mdtrain {

SoftmaxLayer::SoftmaxLayer(std::string name, LayerAxes axes) : Layer(std::move(name)), given_(std::move(axes)) {}

Shape SoftmaxLayer::compute_output_shape(const Shape& input_shape) const {
  given_.resolve("softmax", name_, input_shape);
  return input_shape;
}

void SoftmaxLayer::build_weights(const Shape& input_shape, std::uint64_t) {
  axes_ = given_.resolve("softmax", name_, input_shape);
}

Tensor SoftmaxLayer::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  x_ = x;
  ensure_buffer(y_, x.shape(), dtype_, x.device());
  // Over the last axis alone the rows are contiguous: Activation("softmax")'s kernels.
  if (over_last_axis_only()) ops::bias_activation(x, Tensor(), Activation::Softmax, y_);
  else ops::softmax_over_axes(x, axes_, y_);
  return y_;
}

Tensor SoftmaxLayer::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, y_.shape(), dtype_, y_.device());
  if (over_last_axis_only()) ops::activation_backward(Activation::Softmax, Tensor(), y_, dy.reshape(y_.shape()), dx_);
  else ops::softmax_over_axes_backward(y_, dy.reshape(y_.shape()), axes_, dx_);
  return dx_;
}

bool SoftmaxLayer::over_last_axis_only() const {
  if (!built_) return given_.given.size() == 1 && given_.given.front() == -1;
  return axes_.size() == 1 && LayerAxes::holds_last(axes_, input_shape_);
}

Activation SoftmaxLayer::output_activation() const {
  return over_last_axis_only() ? Activation::Softmax : Activation::Linear;
}

Layer::TensorParallelForm SoftmaxLayer::tensor_parallel_form() const {
  if (!built_) return TensorParallelForm::None;
  return LayerAxes::holds_last(axes_, input_shape_) ? TensorParallelForm::None : TensorParallelForm::Elementwise;
}

std::unique_ptr<Layer> SoftmaxLayer::clone() const {
  auto copy = std::make_unique<SoftmaxLayer>(name_, given_);
  copy->copy_build_state(*this);
  copy->axes_ = axes_;
  return copy;
}

Json SoftmaxLayer::config() const {
  Json c = Layer::config();
  c.set("axis", given_.to_json());
  return c;
}

std::unique_ptr<Layer> SoftmaxLayer::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  return std::make_unique<SoftmaxLayer>(name, LayerAxes::from_json("softmax", name, c.get("axis", Json(-1))));
}

}  // namespace mdtrain
