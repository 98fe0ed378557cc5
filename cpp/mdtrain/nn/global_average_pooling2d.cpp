#include "mdtrain/nn/global_average_pooling2d.h"

#include "mdtrain/nn/window_args.h"
#include "mdtrain/ops/conv_ops.h"

namespace mdtrain {

GlobalAveragePooling2D::GlobalAveragePooling2D(std::string name, bool keepdims, std::string data_format)
    : Layer(std::move(name)), keepdims_(keepdims), data_format_(std::move(data_format)) {
  check_data_format_arg("global_average_pooling2d", name_, data_format_);
}

Shape GlobalAveragePooling2D::compute_output_shape(const Shape& input_shape) const {
  check_image_input_shape("global_average_pooling2d", name_, input_shape);
  if (keepdims_) return {1, 1, input_shape[2]};
  return {input_shape[2]};
}

Tensor GlobalAveragePooling2D::forward(const Tensor& x, const ForwardContext&) {
  MDTRAIN_CHECK(built_, std::logic_error, "[layer] layer \"", name_, "\" was called before it was built");
  MDTRAIN_CHECK(x.ndim() == 4, std::invalid_argument, "[global_average_pooling2d] Input 0 of layer \"", name_,
                "\" is incompatible with the layer: expected ndim=4, found ndim=", x.ndim(),
                ". Full shape received: ", to_string(x.shape()));
  check_input(x);
  last_batch_ = x.dim(0);
  Shape out{last_batch_};
  out.insert(out.end(), output_shape_.begin(), output_shape_.end());
  ensure_buffer(y_, out, dtype_, x.device());
  ops::global_avg_pool2d(x, y_);
  return y_;
}

Tensor GlobalAveragePooling2D::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  Shape in{last_batch_};
  in.insert(in.end(), input_shape_.begin(), input_shape_.end());
  ensure_buffer(dx_, in, dtype_, dy.device());
  ops::global_avg_pool2d_backward(dy, dx_);
  return dx_;
}

std::unique_ptr<Layer> GlobalAveragePooling2D::clone() const {
  auto copy = std::make_unique<GlobalAveragePooling2D>(name_, keepdims_, data_format_);
  copy->copy_build_state(*this);
  return copy;
}

Json GlobalAveragePooling2D::config() const {
  Json c = Layer::config();
  c.set("data_format", data_format_);
  c.set("keepdims", keepdims_);
  return c;
}

std::unique_ptr<Layer> GlobalAveragePooling2D::from_config(const Json& c) {
  return std::make_unique<GlobalAveragePooling2D>(c.at("name").as_string(), c.get("keepdims", false).as_bool(),
                                                  c.get("data_format", "channels_last").as_string());
}

}  // namespace mdtrain
