#include "mdtrain/nn/global_average_pooling1d.h"

#include "mdtrain/nn/window_args.h"
#include "mdtrain/ops/conv_ops.h"
#include "mdtrain/ops/masked_pooling.h"

namespace mdtrain {

namespace {
constexpr const char* kArea = "global_average_pooling1d";
}

GlobalAveragePooling1D::GlobalAveragePooling1D(std::string name, bool keepdims, std::string data_format)
    : Layer(std::move(name)), keepdims_(keepdims), data_format_(std::move(data_format)) {
  check_data_format_arg(kArea, name_, data_format_);
}

Shape GlobalAveragePooling1D::compute_output_shape(const Shape& input_shape) const {
  check_sequence_input_shape(kArea, name_, input_shape);
  require_known_dim(input_shape, -1, "the channels");
  if (keepdims_) return {1, input_shape[1]};
  return {input_shape[1]};
}

Tensor GlobalAveragePooling1D::forward(const Tensor& x, const ForwardContext&) {
  MDTRAIN_CHECK(built_, std::logic_error, "[layer] layer \"", name_, "\" was called before it was built");
  MDTRAIN_CHECK(x.ndim() == 3, std::invalid_argument, "[", kArea, "] Input 0 of layer \"", name_,
                "\" is incompatible with the layer: expected ndim=3, found ndim=", x.ndim(),
                ". Full shape received: ", to_string(x.shape()));
  check_input(x);
  last_input_shape_ = x.shape();
  Shape out{x.dim(0)};
  out.insert(out.end(), output_shape_.begin(), output_shape_.end());
  ensure_buffer(y_, out, dtype_, x.device());
  if (mask_.defined()) {
    check_mask_shape(mask_, x.dim(0), x.dim(1), kArea, name_);
    mask_bytes_ = mask_to_bytes(mask_);
    ops::masked_mean_steps(x, mask_bytes_, y_);
  } else {
    mask_bytes_.clear();
    ops::global_avg_pool2d(x.reshape({x.dim(0), 1, x.dim(1), x.dim(2)}), y_);
  }
  return y_;
}

Tensor GlobalAveragePooling1D::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  const Shape& in = last_input_shape_;
  ensure_buffer(dx_, in, dtype_, dy.device());
  if (!mask_bytes_.empty()) {
    ops::masked_mean_steps_backward(dy, mask_bytes_, dx_);
  } else {
    Tensor image = dx_.reshape({in[0], 1, in[1], in[2]});
    ops::global_avg_pool2d_backward(dy, image);
  }
  return dx_;
}

std::unique_ptr<Layer> GlobalAveragePooling1D::clone() const {
  auto copy = std::make_unique<GlobalAveragePooling1D>(name_, keepdims_, data_format_);
  copy->copy_build_state(*this);
  return copy;
}

Json GlobalAveragePooling1D::config() const {
  Json c = Layer::config();
  c.set("data_format", data_format_);
  c.set("keepdims", keepdims_);
  return c;
}

std::unique_ptr<Layer> GlobalAveragePooling1D::from_config(const Json& c) {
  return std::make_unique<GlobalAveragePooling1D>(c.at("name").as_string(), c.get("keepdims", false).as_bool(),
                                                  c.get("data_format", "channels_last").as_string());
}

}  // namespace mdtrain
