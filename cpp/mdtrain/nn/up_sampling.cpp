#include "mdtrain/nn/up_sampling.h"

#include "mdtrain/nn/window_args.h"
#include "mdtrain/ops/resize_bilinear.h"

namespace mdtrain {

UpSampling::UpSampling(std::string name, Shape size, std::string data_format, std::string interpolation)
    : StridedViewLayer(std::move(name)),
      size_(std::move(size)),
      data_format_(std::move(data_format)),
      interpolation_(std::move(interpolation)) {
  const char* cls = size_.size() == 1 ? "UpSampling1D" : "UpSampling2D";
  bool ok = size_.size() == 1 || size_.size() == 2;
  for (auto s : size_) ok = ok && s > 0;
  MDTRAIN_CHECK(ok, std::invalid_argument, "[layers] ", cls, " layer \"", name_,
                "\": `size` must hold one integer > 0 per spatial dimension. Received: size=", tuple_string(size_));
  check_data_format_arg("layers", name_, data_format_);
  MDTRAIN_CHECK(interpolation_ == "nearest" || (interpolation_ == "bilinear" && size_.size() == 2),
                std::invalid_argument, "[layers] ", cls, " layer \"", name_, "\": interpolation=\"", interpolation_,
                "\" is not supported: only \"nearest\" and \"bilinear\"");
}

Shape UpSampling::compute_output_shape(const Shape& input_shape) const {
  check_input_ndim(name_, input_shape, size_.size() + 2);
  Shape out = input_shape;
  for (std::size_t d = 0; d < size_.size(); ++d) out[d] *= size_[d];
  return out;
}

Tensor UpSampling::forward(const Tensor& x, const ForwardContext& ctx) {
  if (interpolation_ == "nearest") return StridedViewLayer::forward(x, ctx);
  check_input(x);
  last_batch_ = x.dim(0);
  ensure_buffer(y_, {last_batch_, output_shape_[0], output_shape_[1], output_shape_[2]}, dtype_, x.device());
  ops::resize_bilinear(x, y_);
  return y_;
}

Tensor UpSampling::backward(const Tensor& dy, bool need_input_grad) {
  if (interpolation_ == "nearest") return StridedViewLayer::backward(dy, need_input_grad);
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, {last_batch_, input_shape_[0], input_shape_[1], input_shape_[2]}, dtype_, dy.device());
  ops::resize_bilinear_backward(dy, dx_);
  return dx_;
}

ops::ViewPlan UpSampling::forward_plan(std::int64_t batch) const {
  return repeat_plan(batch, input_shape_, size_, false);
}

ops::ViewPlan UpSampling::backward_plan(std::int64_t batch) const {
  return repeat_plan(batch, input_shape_, size_, true);
}

std::unique_ptr<Layer> UpSampling::clone() const {
  auto copy = std::make_unique<UpSampling>(name_, size_, data_format_, interpolation_);
  copy->copy_build_state(*this);
  return copy;
}

Json UpSampling::config() const {
  Json c = Layer::config();
  if (size_.size() == 1) {
    c.set("size", Json(size_[0]));  // Keras's UpSampling1D keeps an int
    return c;
  }
  c.set("size", pair_to_json(size_));
  c.set("data_format", data_format_);
  c.set("interpolation", interpolation_);
  return c;
}

std::unique_ptr<Layer> UpSampling::from_config_1d(const Json& c) {
  return std::make_unique<UpSampling>(c.at("name").as_string(), Shape{c.get("size", 2).as_int()});
}

std::unique_ptr<Layer> UpSampling::from_config_2d(const Json& c) {
  return std::make_unique<UpSampling>(c.at("name").as_string(), pair_from_json(c.get("size", 2)),
                                      c.get("data_format", "channels_last").as_string(),
                                      c.get("interpolation", "nearest").as_string());
}

}  // namespace mdtrain
