#include "mdtrain/nn/global_max_pooling.h"

#include "mdtrain/nn/window_args.h"
#include "mdtrain/ops/conv_ops.h"

namespace mdtrain {

GlobalMaxPooling::GlobalMaxPooling(std::string name, bool keepdims, std::string data_format, int spatial_rank,
                                   const char* area)
    : Layer(std::move(name)),
      keepdims_(keepdims),
      data_format_(std::move(data_format)),
      spatial_rank_(spatial_rank),
      area_(area) {
  check_data_format_arg(area_, name_, data_format_);
}

Shape GlobalMaxPooling::compute_output_shape(const Shape& input_shape) const {
  if (spatial_rank_ == 1) check_sequence_input_shape(area_, name_, input_shape);
  else check_image_input_shape(area_, name_, input_shape);
  require_known_dim(input_shape, -1, "the channels");
  const std::int64_t channels = input_shape.back();
  if (!keepdims_) return {channels};
  Shape out(static_cast<std::size_t>(spatial_rank_), 1);
  out.push_back(channels);
  return out;
}

Tensor GlobalMaxPooling::forward(const Tensor& x, const ForwardContext&) {
  MDTRAIN_CHECK(built_, std::logic_error, "[layer] layer \"", name_, "\" was called before it was built");
  const int ndim = spatial_rank_ + 2;
  MDTRAIN_CHECK(x.ndim() == ndim, std::invalid_argument, "[", area_, "] Input 0 of layer \"", name_,
                "\" is incompatible with the layer: expected ndim=", ndim, ", found ndim=", x.ndim(),
                ". Full shape received: ", to_string(x.shape()));
  check_input(x);
  last_input_shape_ = x.shape();
  Shape out{x.dim(0)};
  out.insert(out.end(), output_shape_.begin(), output_shape_.end());
  ensure_buffer(y_, out, dtype_, x.device());
  ensure_buffer(argmax_, out, DType::Int32, x.device());
  const Tensor image = spatial_rank_ == 1 ? x.reshape({x.dim(0), 1, x.dim(1), x.dim(2)}) : x;
  ops::global_max_pool2d(image, y_, argmax_);
  return y_;
}

Tensor GlobalMaxPooling::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  const Shape& in = last_input_shape_;
  ensure_buffer(dx_, in, dtype_, dy.device());
  Tensor image = spatial_rank_ == 1 ? dx_.reshape({in[0], 1, in[1], in[2]}) : dx_;
  ops::global_max_pool2d_backward(dy.reshape(argmax_.shape()), argmax_, image);
  return dx_;
}

Json GlobalMaxPooling::config() const {
  Json c = Layer::config();
  c.set("data_format", data_format_);
  c.set("keepdims", keepdims_);
  return c;
}

std::unique_ptr<Layer> GlobalMaxPooling1D::from_config(const Json& c) {
  return std::make_unique<GlobalMaxPooling1D>(c.at("name").as_string(), c.get("keepdims", false).as_bool(),
                                              c.get("data_format", "channels_last").as_string());
}

std::unique_ptr<Layer> GlobalMaxPooling2D::from_config(const Json& c) {
  return std::make_unique<GlobalMaxPooling2D>(c.at("name").as_string(), c.get("keepdims", false).as_bool(),
                                              c.get("data_format", "channels_last").as_string());
}

}  // namespace mdtrain
