#include "mdtrain/nn/conv_transpose.h"

#include <algorithm>

#include "mdtrain/nn/grown_buffer.h"
#include "mdtrain/nn/window_args.h"
#include "mdtrain/ops/conv_ops.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

std::int64_t conv_transpose_output_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d, bool same,
                                        std::int64_t output_padding) {
  const std::int64_t e = math::dilated_extent(k, d);
  if (!same) return (in - 1) * s + e + (output_padding < 0 ? std::max(e, s) - e : output_padding);
  if (output_padding < 0) return in * s;
  return (in - 1) * s + e % 2 + output_padding;
}

Conv2DTranspose::Conv2DTranspose(std::string name, Options options, int spatial_rank, const char* area)
    : Layer(std::move(name)),
      spatial_rank_(spatial_rank),
      area_(area),
      options_(std::move(options)),
      activation_(parse_activation(options_.activation)) {
  MDTRAIN_CHECK(options_.filters > 0, std::invalid_argument, "[", area_, "] layer \"", name_,
                "\": Invalid value for argument `filters`. Expected a strictly positive value. Received filters=",
                options_.filters, ".");
  const auto n = static_cast<std::size_t>(spatial_rank_);
  check_tuple_arg(area_, name_, "kernel_size", options_.kernel_size, n);
  check_tuple_arg(area_, name_, "strides", options_.strides, n);
  check_tuple_arg(area_, name_, "dilation_rate", options_.dilation_rate, n);
  if (!options_.output_padding.empty()) {
    check_tuple_arg(area_, name_, "output_padding", options_.output_padding, n, /*allow_zero=*/true);
    for (std::size_t i = 0; i < n; ++i)
      MDTRAIN_CHECK(options_.output_padding[i] < options_.strides[i], std::invalid_argument, "[", area_, "] layer \"",
                    name_,
                    "\": `output_padding` must be strictly less than `strides` for all dimensions. At dimension ", i,
                    ", `output_padding` is ", options_.output_padding[i], " but `strides` is ", options_.strides[i],
                    ". Received: output_padding=", tuple_string(options_.output_padding),
                    ", strides=", tuple_string(options_.strides));
  }
  options_.padding = check_padding_arg(area_, name_, options_.padding);
  check_data_format_arg(area_, name_, options_.data_format);
  const auto max_of = [](const std::vector<std::int64_t>& v) { return *std::max_element(v.begin(), v.end()); };
  MDTRAIN_CHECK(max_of(options_.strides) == 1 || max_of(options_.dilation_rate) == 1, std::invalid_argument, "[", area_,
                "] layer \"", name_,
                "\": `strides > 1` not supported in conjunction with `dilation_rate > 1`. Received: strides=",
                tuple_string(options_.strides), " and dilation_rate=", tuple_string(options_.dilation_rate));
  make_initializer(options_.kernel_initializer);  // validate names now, not at build time
  make_initializer(options_.bias_initializer);
  weights_.kernel_regularizer = make_regularizer(options_.kernel_regularizer);
  weights_.bias_regularizer = make_regularizer(options_.bias_regularizer);
}

Window2D Conv2DTranspose::window_for(const Shape& input_shape) const {
  const bool same = options_.padding == "same";
  const auto& k = options_.kernel_size;
  const auto& s = options_.strides;
  const auto& d = options_.dilation_rate;
  const auto& op = options_.output_padding;
  // The height axis of a sequence is the one-row image's: one row in, one row out.
  std::int64_t in_h = 1, in_w = 0, kh = 1, sh = 1, dh = 1, out_h = 1;
  std::size_t w = 0;  // the index of the width axis in the tuples
  if (spatial_rank_ == 1) {
    check_sequence_input_shape(area_, name_, input_shape);
    in_w = input_shape[0];
  } else {
    check_image_input_shape(area_, name_, input_shape);
    in_h = input_shape[0];
    in_w = input_shape[1];
    kh = k[0], sh = s[0], dh = d[0], w = 1;
    out_h = conv_transpose_output_size(in_h, kh, sh, dh, same, op.empty() ? -1 : op[0]);
  }
  const std::int64_t out_w = conv_transpose_output_size(in_w, k[w], s[w], d[w], same, op.empty() ? -1 : op[w]);
  // The convolution from the transposed output (filters channels) back to the input, with TF's
  // padding on the transposed output's size.
  const Window2D g = ops::make_window2d(out_h, out_w, options_.filters, kh, k[w], sh, s[w], dh, d[w], same);
  if (g.out_h != in_h || g.out_w != in_w) {
    // Only "same" with an even dilated kernel and output_padding 0 gets here: the output is one
    // row short of what the convolution maps back onto the input (TensorFlow fails at run time).
    std::vector<std::int64_t> in{in_w}, out{out_w}, back{g.out_w};
    if (spatial_rank_ == 2) in = {in_h, in_w}, out = {out_h, out_w}, back = {g.out_h, g.out_w};
    fail<std::invalid_argument>(
        "[", area_, "] layer \"", name_, "\": padding=\"same\" with kernel_size ", tuple_string(k), ", dilation_rate ",
        tuple_string(d), ", strides ", tuple_string(s), " and output_padding ", tuple_string(op),
        " gives the output size ", tuple_string(out), ", which a convolution with these arguments maps to ",
        tuple_string(back), ", not to the input's spatial size ", tuple_string(in),
        ": no transposed convolution has that output (give output_padding >= 1 where the dilated kernel is even)");
  }
  return g;
}

Shape Conv2DTranspose::compute_output_shape(const Shape& input_shape) const {
  const Window2D g = window_for(input_shape);
  if (spatial_rank_ == 1) return {g.in_w, options_.filters};
  return {g.in_h, g.in_w, options_.filters};
}

Shape Conv2DTranspose::output_dims(std::int64_t images) const {
  if (spatial_rank_ == 1) return {images, window_.in_w, options_.filters};
  return {images, window_.in_h, window_.in_w, options_.filters};
}

void Conv2DTranspose::build_weights(const Shape& input_shape, std::uint64_t seed) {
  window_ = window_for(input_shape);
  const std::int64_t kh = window_.k_h, kw = window_.k_w, filters = options_.filters, cin = input_shape.back();
  Rng rng(seed, 0);
  // Keras's layout: (kh, kw, filters, in), or (k, filters, in) for Conv1DTranspose (the same memory).
  const Shape kernel_shape = spatial_rank_ == 1 ? Shape{kw, filters, cin} : Shape{kh, kw, filters, cin};
  weights_.kernel = Parameter(name_ + "/kernel", Tensor(kernel_shape, dtype_));
  // Keras's fans of a kernel (..., a, b): the receptive field times a (in) and times b (out).
  make_initializer(options_.kernel_initializer)->fill(weights_.kernel.value, kh * kw * filters, kh * kw * cin, rng);
  if (options_.use_bias) {
    weights_.bias = Parameter(name_ + "/bias", Tensor({filters}, dtype_));
    Rng bias_rng(seed, 1);
    make_initializer(options_.bias_initializer)->fill(weights_.bias.value, filters, filters, bias_rng);
  }
}

void Conv2DTranspose::set_column_budget_bytes(std::int64_t bytes) {
  MDTRAIN_CHECK(bytes > 0, std::invalid_argument, "[", area_, "] layer \"", name_,
                "\": the column budget must be positive, got ", bytes);
  column_budget_bytes_ = bytes;
}

std::int64_t Conv2DTranspose::images_per_chunk(const Device& device) const {
  const std::int64_t budget =
      column_budget_bytes_ > 0 ? column_budget_bytes_ : (device.is_cpu() ? kColumnBudgetBytes : kGpuColumnBudgetBytes);
  // One image's columns: a row of k_h * k_w * filters per input pixel.
  const std::int64_t per_image = window_.out_h * window_.out_w * window_.k_h * window_.k_w * window_.channels *
                                 static_cast<std::int64_t>(size_of(dtype_));
  return std::max<std::int64_t>(1, budget / std::max<std::int64_t>(1, per_image));
}

void Conv2DTranspose::check_transpose_input(const Tensor& x) const {
  MDTRAIN_CHECK(built_, std::logic_error, "[layer] layer \"", name_, "\" was called before it was built");
  const int ndim = spatial_rank_ + 2;
  MDTRAIN_CHECK(x.ndim() == ndim, std::invalid_argument, "[", area_, "] Input 0 of layer \"", name_,
                "\" is incompatible with the layer: expected ndim=", ndim, ", found ndim=", x.ndim(),
                ". Full shape received: ", to_string(x.shape()));
  MDTRAIN_CHECK(x.dim(ndim - 1) == input_shape_.back(), std::invalid_argument, "[", area_, "] Input 0 of layer \"",
                name_, "\" is incompatible with the layer: expected axis -1 of input shape to have value ",
                input_shape_.back(), ", but received input with shape ", to_string(x.shape()));
  check_input(x);
}

Tensor Conv2DTranspose::forward(const Tensor& input, const ForwardContext&) {
  check_transpose_input(input);
  const Tensor x = spatial_rank_ == 1 ? input.reshape({input.dim(0), 1, input.dim(1), input.dim(2)}) : input;
  x_ = x;
  const Window2D& g = window_;
  const std::int64_t images = x.dim(0), cin = x.dim(3), in_pixels = g.out_h * g.out_w, out_pixels = g.in_h * g.in_w,
                     depth = g.k_h * g.k_w * g.channels, filters = options_.filters;
  const Device& device = x.device();
  const bool keep = keeps_preactivation(activation_);
  ensure_buffer(y_, {images * out_pixels, filters}, dtype_, device);
  if (keep) ensure_buffer(z_, {images * out_pixels, filters}, dtype_, device);
  const Tensor w = weights_.kernel.value.reshape({depth, cin});
  const std::int64_t chunk = images_per_chunk(device);
  for (std::int64_t b0 = 0; b0 < images; b0 += chunk) {
    const std::int64_t b1 = std::min(images, b0 + chunk), n = b1 - b0;
    // The convolution's input gradient: d(columns) = x @ kernel^T, scattered back by col2im.
    Tensor col = grown_rows(col_, n * in_pixels, depth, dtype_, device);
    ops::gemm(x.rows(b0, b1).reshape({n * in_pixels, cin}), false, w, true, col);
    Tensor z = (keep ? z_ : y_).rows(b0 * out_pixels, b1 * out_pixels);
    Tensor z_images = z.reshape({n, g.in_h, g.in_w, filters});
    ops::col2im(col, g, z_images);
    Tensor y = y_.rows(b0 * out_pixels, b1 * out_pixels);
    weights_.add_bias_and_activate(z, options_.use_bias, activation_, keep, y);
  }
  return y_.reshape(output_dims(images));
}

Tensor Conv2DTranspose::logits() const {
  MDTRAIN_CHECK(keeps_preactivation(activation_), std::logic_error, "[", area_, "] layer \"", name_,
                "\" keeps no logits for activation ", name_of(activation_));
  return z_.reshape(output_dims(x_.dim(0)));
}

Tensor Conv2DTranspose::backward(const Tensor& dy, bool need_input_grad) {
  return backward_chunks(dy.reshape({-1, options_.filters}), activation_ != Activation::Linear, need_input_grad);
}

Tensor Conv2DTranspose::backward_from_logits(const Tensor& dlogits, bool need_input_grad) {
  return backward_chunks(dlogits.reshape({-1, options_.filters}), false, need_input_grad);
}

Tensor Conv2DTranspose::backward_chunks(const Tensor& grad, bool through_activation, bool need_input_grad) {
  const Window2D& g = window_;
  const std::int64_t images = x_.dim(0), cin = x_.dim(3), in_pixels = g.out_h * g.out_w, out_pixels = g.in_h * g.in_w,
                     depth = g.k_h * g.k_w * g.channels, filters = options_.filters;
  MDTRAIN_CHECK(grad.dim(0) == images * out_pixels, std::invalid_argument, "[", area_, "] layer \"", name_,
                "\": the output gradient has ", grad.dim(0), " rows, the last forward produced ", images * out_pixels);
  const Device& device = x_.device();
  const bool keep = keeps_preactivation(activation_);
  if (need_input_grad) ensure_buffer(dx_, x_.shape(), dtype_, device);
  const auto input_gradient = [&] {
    if (!need_input_grad) return Tensor();
    return spatial_rank_ == 1 ? dx_.reshape({images, g.out_w, cin}) : dx_;
  };
  if (images == 0) {
    weights_.kernel.grad.fill(0.0);
    if (options_.use_bias) weights_.bias.grad.fill(0.0);
    return input_gradient();
  }
  const Tensor w = weights_.kernel.value.reshape({depth, cin});
  Tensor dw = weights_.kernel.grad.reshape({depth, cin});
  const std::int64_t chunk = images_per_chunk(device);
  for (std::int64_t b0 = 0; b0 < images; b0 += chunk) {
    const std::int64_t b1 = std::min(images, b0 + chunk), n = b1 - b0, p0 = b0 * out_pixels, p1 = b1 * out_pixels;
    const double beta = b0 == 0 ? 0.0 : 1.0;  // the first chunk overwrites the gradients, the others add
    Tensor dz = grad.rows(p0, p1);
    if (through_activation) {
      Tensor scratch = grown_rows(dz_, p1 - p0, filters, dtype_, device);
      ops::activation_backward(activation_, keep ? z_.rows(p0, p1) : Tensor(), y_.rows(p0, p1), dz, scratch);
      dz = scratch;
    }
    if (options_.use_bias) ops::sum_rows(dz, weights_.bias.grad, beta);
    // The convolution's forward of dz: its columns, then kernel gradient and input gradient.
    Tensor col = grown_rows(col_, n * in_pixels, depth, dtype_, device);
    ops::im2col(dz.reshape({n, g.in_h, g.in_w, filters}), g, col);
    ops::gemm(col, true, x_.rows(b0, b1).reshape({n * in_pixels, cin}), false, dw, 1.0, beta);
    if (need_input_grad) {
      Tensor dx = dx_.rows(b0, b1).reshape({n * in_pixels, cin});
      ops::gemm(col, false, w, false, dx);
    }
  }
  return input_gradient();
}

std::vector<Parameter*> Conv2DTranspose::parameters() { return weights_.parameters(built_, options_.use_bias); }

double Conv2DTranspose::regularization_loss() const { return weights_.regularization_loss(built_, options_.use_bias); }

void Conv2DTranspose::add_regularization_gradients() { weights_.add_regularization_gradients(options_.use_bias); }

void Conv2DTranspose::copy_state_to(Conv2DTranspose& copy) const {
  copy.copy_build_state(*this);
  copy.window_ = window_;
  copy.column_budget_bytes_ = column_budget_bytes_;
  copy.weights_.copy_values_from(weights_, built_, options_.use_bias);
}

std::unique_ptr<Layer> Conv2DTranspose::clone() const {
  auto copy = std::make_unique<Conv2DTranspose>(name_, options_);
  copy_state_to(*copy);
  return copy;
}

std::unique_ptr<Layer> Conv1DTranspose::clone() const {
  auto copy = std::make_unique<Conv1DTranspose>(name_, options());
  copy_state_to(*copy);
  return copy;
}

Json Conv2DTranspose::config() const {
  Json c = Layer::config();
  c.set("filters", options_.filters);
  c.set("kernel_size", pair_to_json(options_.kernel_size));
  c.set("strides", pair_to_json(options_.strides));
  c.set("padding", options_.padding);
  c.set("output_padding", options_.output_padding.empty() ? Json() : pair_to_json(options_.output_padding));
  c.set("data_format", options_.data_format);
  c.set("dilation_rate", pair_to_json(options_.dilation_rate));
  weights_.write_config(c, activation_, options_);
  c.set("activity_regularizer", Json());
  c.set("kernel_constraint", Json());
  c.set("bias_constraint", Json());
  return c;
}

Conv2DTranspose::Options Conv2DTranspose::options_from_config(const Json& c, std::size_t rank) {
  Options o;
  o.filters = c.at("filters").as_int();
  o.kernel_size = tuple_from_json(c.at("kernel_size"), rank);
  o.strides = tuple_from_json(c.get("strides", Json(1)), rank);
  o.padding = c.get("padding", "valid").as_string();
  const Json output_padding = c.get("output_padding", Json());
  if (!output_padding.is_null()) o.output_padding = tuple_from_json(output_padding, rank);
  o.data_format = c.get("data_format", "channels_last").as_string();
  o.dilation_rate = tuple_from_json(c.get("dilation_rate", Json(1)), rank);
  read_kernel_bias_config(c, o);
  return o;
}

std::unique_ptr<Layer> Conv2DTranspose::from_config(const Json& c) {
  return std::make_unique<Conv2DTranspose>(c.at("name").as_string(), options_from_config(c, 2));
}

std::unique_ptr<Layer> Conv1DTranspose::from_config(const Json& c) {
  return std::make_unique<Conv1DTranspose>(c.at("name").as_string(), options_from_config(c, 1));
}

}  // namespace mdtrain
