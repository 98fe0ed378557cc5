#include "mdtrain/nn/pooling2d.h"

#include "mdtrain/nn/window_args.h"
#include "mdtrain/ops/conv_ops.h"

namespace mdtrain {

Pooling2D::Pooling2D(std::string name, Options options, const char* area, int spatial_rank)
    : Layer(std::move(name)), options_(std::move(options)), area_(area), spatial_rank_(spatial_rank) {
  const auto n = static_cast<std::size_t>(spatial_rank_);
  check_tuple_arg(area_, name_, "pool_size", options_.pool_size, n);
  if (options_.strides.empty()) options_.strides = options_.pool_size;
  check_tuple_arg(area_, name_, "strides", options_.strides, n);
  options_.padding = check_padding_arg(area_, name_, options_.padding);
  check_data_format_arg(area_, name_, options_.data_format);
}

Window2D Pooling2D::window_for(const Shape& input_shape) const {
  const auto& k = options_.pool_size;
  const auto& s = options_.strides;
  const bool same = options_.padding == "same";
  Window2D g;
  if (spatial_rank_ == 1) {
    check_sequence_input_shape(area_, name_, input_shape);
    g = ops::make_window2d(1, input_shape[0], input_shape[1], 1, k[0], 1, s[0], 1, 1, same);
  } else {
    check_image_input_shape(area_, name_, input_shape);
    g = ops::make_window2d(input_shape[0], input_shape[1], input_shape[2], k[0], k[1], s[0], s[1], 1, 1, same);
  }
  if (g.out_h == 0 || g.out_w == 0)
    fail_window_larger_than_input(area_, name_, "pool_size " + tuple_string(k), input_shape, spatial_rank_);
  return g;
}

Shape Pooling2D::compute_output_shape(const Shape& input_shape) const {
  require_known_dim(input_shape, -1, "the channels");
  const Window2D g = window_for(with_spatial_stand_ins(input_shape, options_.pool_size));
  const Shape out = spatial_rank_ == 1 ? Shape{g.out_w, g.channels} : Shape{g.out_h, g.out_w, g.channels};
  return with_unknown_spatial_dims(input_shape, out);
}

void Pooling2D::build_weights(const Shape& input_shape, std::uint64_t) {
  window_ = window_for(with_spatial_stand_ins(input_shape, options_.pool_size));
}

Tensor Pooling2D::check_pool_input(const Tensor& x) {
  MDTRAIN_CHECK(built_, std::logic_error, "[layer] layer \"", name_, "\" was called before it was built");
  const int ndim = spatial_rank_ + 2;
  MDTRAIN_CHECK(x.ndim() == ndim, std::invalid_argument, "[", area_, "] Input 0 of layer \"", name_,
                "\" is incompatible with the layer: expected ndim=", ndim, ", found ndim=", x.ndim(),
                ". Full shape received: ", to_string(x.shape()));
  check_input(x);
  // Built for unknown spatial dimensions: the geometry of this batch's size (backward uses it).
  if (!window_fits(window_, x)) window_ = window_for(sample_shape(x));
  return spatial_rank_ == 1 ? x.reshape({x.dim(0), 1, x.dim(1), x.dim(2)}) : x;
}

Json Pooling2D::config() const {
  Json c = Layer::config();
  c.set("pool_size", pair_to_json(options_.pool_size));
  c.set("padding", options_.padding);
  c.set("strides", pair_to_json(options_.strides));
  c.set("data_format", options_.data_format);
  return c;
}

Tensor MaxPooling2D::forward(const Tensor& input, const ForwardContext&) {
  const Tensor x = check_pool_input(input);
  const Shape out{x.dim(0), window_.out_h, window_.out_w, window_.channels};
  ensure_buffer(y_, out, dtype_, x.device());
  ensure_buffer(argmax_, out, DType::Int32, x.device());
  ops::max_pool2d(x, window_, y_, argmax_);
  return in_layer_rank(y_);
}

Tensor MaxPooling2D::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, {argmax_.dim(0), window_.in_h, window_.in_w, window_.channels}, dtype_, argmax_.device());
  ops::max_pool2d_backward(dy.reshape(argmax_.shape()), argmax_, window_, dx_);
  return in_layer_rank(dx_);
}

std::unique_ptr<Layer> MaxPooling2D::clone() const {
  auto copy = std::make_unique<MaxPooling2D>(name_, options_);
  copy->copy_pooling_state(*this);
  return copy;
}

Tensor AveragePooling2D::forward(const Tensor& input, const ForwardContext&) {
  const Tensor x = check_pool_input(input);
  ensure_buffer(y_, {x.dim(0), window_.out_h, window_.out_w, window_.channels}, dtype_, x.device());
  ops::avg_pool2d(x, window_, y_);
  return in_layer_rank(y_);
}

Tensor AveragePooling2D::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, {y_.dim(0), window_.in_h, window_.in_w, window_.channels}, dtype_, y_.device());
  ops::avg_pool2d_backward(dy.reshape(y_.shape()), window_, dx_);
  return in_layer_rank(dx_);
}

std::unique_ptr<Layer> AveragePooling2D::clone() const {
  auto copy = std::make_unique<AveragePooling2D>(name_, options_);
  copy->copy_pooling_state(*this);
  return copy;
}

Pooling2D::Options Pooling2D::options_from_config(const Json& c) {
  Options o;
  o.pool_size = pair_from_json(c.get("pool_size", Json(2)));
  if (c.contains("strides") && !c.at("strides").is_null()) o.strides = pair_from_json(c.at("strides"));
  o.padding = c.get("padding", "valid").as_string();
  o.data_format = c.get("data_format", "channels_last").as_string();
  return o;
}

std::unique_ptr<Layer> MaxPooling2D::from_config(const Json& c) {
  return std::make_unique<MaxPooling2D>(c.at("name").as_string(), options_from_config(c));
}

std::unique_ptr<Layer> AveragePooling2D::from_config(const Json& c) {
  return std::make_unique<AveragePooling2D>(c.at("name").as_string(), options_from_config(c));
}

}  // namespace mdtrain
