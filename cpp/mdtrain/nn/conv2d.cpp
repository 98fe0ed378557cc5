#include "mdtrain/nn/conv2d.h"

#include <algorithm>

#include "mdtrain/nn/grown_buffer.h"
#include "mdtrain/nn/window_args.h"
#include "mdtrain/ops/conv_ops.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

Conv2D::Conv2D(std::string name, Options options, int spatial_rank, const char* area)
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
  options_.padding = check_padding_arg(area_, name_, options_.padding, /*allow_causal=*/spatial_rank_ == 1);
  same_padding_ = options_.padding == "same";
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

Window2D Conv2D::window_for(const Shape& input_shape) const {
  const auto& k = options_.kernel_size;
  const auto& s = options_.strides;
  const auto& d = options_.dilation_rate;
  Window2D g;
  if (spatial_rank_ == 1) {
    check_sequence_input_shape(area_, name_, input_shape);
    g = ops::make_window2d(1, input_shape[0], input_shape[1], 1, k[0], 1, s[0], 1, d[0], same_padding_);
    if (options_.padding == "causal") {
      // Keras's causal padding: dilation * (k - 1) zeros before the first step and none after, so
      // output t reads steps up to t * stride only; then a "valid" window over the padded length.
      g.pad_left = d[0] * (k[0] - 1);
      g.out_w = (input_shape[0] - 1) / s[0] + 1;
    }
  } else {
    check_image_input_shape(area_, name_, input_shape);
    g = ops::make_window2d(input_shape[0], input_shape[1], input_shape[2], k[0], k[1], s[0], s[1], d[0], d[1],
                           same_padding_);
  }
  if (g.out_h == 0 || g.out_w == 0) {
    std::vector<std::int64_t> extent;
    for (std::size_t i = 0; i < k.size(); ++i) extent.push_back(math::dilated_extent(k[i], d[i]));
    const std::string dilated =
        extent == k ? std::string()
                    : cat(" (dilated by dilation_rate ", tuple_string(d), " to ", tuple_string(extent), ")");
    fail_window_larger_than_input(area_, name_, "kernel_size " + tuple_string(k) + dilated, input_shape, spatial_rank_);
  }
  return g;
}

std::vector<std::int64_t> Conv2D::kernel_extents() const {
  std::vector<std::int64_t> extents;
  for (std::size_t i = 0; i < options_.kernel_size.size(); ++i)
    extents.push_back(math::dilated_extent(options_.kernel_size[i], options_.dilation_rate[i]));
  return extents;
}

Shape Conv2D::compute_output_shape(const Shape& input_shape) const {
  require_known_dim(input_shape, -1, "the kernel's input channels");
  const Window2D g = window_for(with_spatial_stand_ins(input_shape, kernel_extents()));
  const Shape out = spatial_rank_ == 1 ? Shape{g.out_w, options_.filters} : Shape{g.out_h, g.out_w, options_.filters};
  return with_unknown_spatial_dims(input_shape, out);
}

Shape Conv2D::output_dims(std::int64_t images) const {
  if (spatial_rank_ == 1) return {images, window_.out_w, options_.filters};
  return {images, window_.out_h, window_.out_w, options_.filters};
}

void Conv2D::build_weights(const Shape& input_shape, std::uint64_t seed) {
  window_ = window_for(with_spatial_stand_ins(input_shape, kernel_extents()));
  const std::int64_t kh = window_.k_h, kw = window_.k_w, cin = window_.channels, filters = options_.filters;
  Rng rng(seed, 0);
  // Keras's layout: (kh, kw, in, filters), or (k, in, filters) for Conv1D (the same memory).
  const Shape kernel_shape = spatial_rank_ == 1 ? Shape{kw, cin, filters} : Shape{kh, kw, cin, filters};
  weights_.kernel = Parameter(name_ + "/kernel", Tensor(kernel_shape, dtype_));
  // Keras's fans for a conv kernel: the receptive field times the input / output channels.
  make_initializer(options_.kernel_initializer)->fill(weights_.kernel.value, kh * kw * cin, kh * kw * filters, rng);
  if (options_.use_bias) {
    weights_.bias = Parameter(name_ + "/bias", Tensor({filters}, dtype_));
    Rng bias_rng(seed, 1);
    make_initializer(options_.bias_initializer)->fill(weights_.bias.value, filters, filters, bias_rng);
  }
}

bool Conv2D::pointwise() const {
  return window_.k_h == 1 && window_.k_w == 1 && window_.stride_h == 1 && window_.stride_w == 1;
}

std::int64_t Conv2D::output_rows_per_chunk(const Device& device) const {
  // A chunk's columns and its rows of output (and of the output gradient in backward) together
  // stay within the budget, so each pass over a chunk (im2col, GEMM, bias and activation; or
  // activation gradient, bias gradient, kernel-gradient GEMM, input-gradient GEMM, col2im) finds
  // the chunk still in cache instead of streaming the whole batch through memory once per pass.
  // The unit is one output row of one image, so the bound holds for large images too. On a GPU
  // the (much larger) budget only bounds memory: see kGpuColumnBudgetBytes.
  const std::int64_t budget =
      column_budget_bytes_ > 0 ? column_budget_bytes_ : (device.is_cpu() ? kColumnBudgetBytes : kGpuColumnBudgetBytes);
  const std::int64_t depth = window_.k_h * window_.k_w * window_.channels;
  const std::int64_t per_row =
      window_.out_w * (depth + 2 * options_.filters) * static_cast<std::int64_t>(size_of(dtype_));
  return std::max<std::int64_t>(1, budget / std::max<std::int64_t>(1, per_row));
}

void Conv2D::set_column_budget_bytes(std::int64_t bytes) {
  MDTRAIN_CHECK(bytes > 0, std::invalid_argument, "[", area_, "] layer \"", name_,
                "\": the column budget must be positive, got ", bytes);
  column_budget_bytes_ = bytes;
}

Tensor Conv2D::column_rows(Tensor& buffer, std::int64_t rows, const Device& device) {
  return grown_rows(buffer, rows, window_.k_h * window_.k_w * window_.channels, dtype_, device);
}

void Conv2D::check_conv_input(const Tensor& x) const {
  MDTRAIN_CHECK(built_, std::logic_error, "[layer] layer \"", name_, "\" was called before it was built");
  const int ndim = spatial_rank_ + 2;
  MDTRAIN_CHECK(x.ndim() == ndim, std::invalid_argument, "[", area_, "] Input 0 of layer \"", name_,
                "\" is incompatible with the layer: expected ndim=", ndim, ", found ndim=", x.ndim(),
                ". Full shape received: ", to_string(x.shape()));
  MDTRAIN_CHECK(x.dim(ndim - 1) == input_shape_.back(), std::invalid_argument, "[", area_, "] Input 0 of layer \"",
                name_, "\" is incompatible with the layer: expected axis -1 of input shape to have value ",
                input_shape_.back(), ", but received input with shape ", to_string(x.shape()));
  check_input(x);  // the spatial size the layer was built for, and the dtype
}

Tensor Conv2D::forward(const Tensor& input, const ForwardContext&) {
  check_conv_input(input);
  // Built for unknown spatial dimensions: the geometry of this batch's size (backward uses it).
  if (!window_fits(window_, input)) window_ = window_for(sample_shape(input));
  // A sequence runs as an image of one row (see the constructor's note).
  const Tensor x = spatial_rank_ == 1 ? input.reshape({input.dim(0), 1, input.dim(1), input.dim(2)}) : input;
  x_ = x;
  const std::int64_t images = x.dim(0), positions = window_.out_h * window_.out_w, rows = images * positions,
                     depth = window_.k_h * window_.k_w * window_.channels, filters = options_.filters;
  const Device& device = x.device();
  ensure_buffer(y_, {rows, filters}, dtype_, device);
  if (keeps_preactivation(activation_)) ensure_buffer(z_, {rows, filters}, dtype_, device);
  const std::int64_t out_rows = images * window_.out_h, chunk = output_rows_per_chunk(device);
  // Backward needs the columns again. They are kept for it when the whole batch is one chunk, or,
  // on a CPU, when they are no larger than the output (kh*kw*cin <= filters: the first layer of an
  // image model): there, rebuilding short kernel rows costs more than storing them. Otherwise
  // backward rebuilds each chunk's columns, which is cheaper than streaming them through memory
  // twice (and on a GPU keeps the columns within the budget).
  columns_kept_ = !pointwise() && (out_rows <= chunk || (device.is_cpu() && depth <= filters));
  if (columns_kept_) column_rows(col_, rows, device);
  // Runs of whole images over the intra-op threads when the op finds the pass worth splitting.
  const std::int64_t macs = rows * depth * filters;
  ops::conv2d_image_runs(
      device, images, macs,
      [&](int runs) {
        last_runs_ = runs;
        if (runs > 1) run_col_.resize(static_cast<std::size_t>(runs));
      },
      [&](int r, std::int64_t first_image, std::int64_t last_image) {
        forward_rows(x, first_image * window_.out_h, last_image * window_.out_h, chunk,
                     r == 0 ? col_ : run_col_[static_cast<std::size_t>(r)]);
      });
  return y_.reshape(output_dims(images));
}

void Conv2D::forward_rows(const Tensor& x, std::int64_t first, std::int64_t last, std::int64_t chunk,
                          Tensor& col_buffer) {
  const std::int64_t rows = x.dim(0) * window_.out_h * window_.out_w,
                     depth = window_.k_h * window_.k_w * window_.channels;
  const bool keep = keeps_preactivation(activation_);
  const Tensor w = weights_.kernel.value.reshape({depth, options_.filters});
  const Tensor x2 = pointwise() ? x.reshape({rows, depth}) : Tensor();  // a 1x1 conv's own columns
  for (std::int64_t r0 = first; r0 < last; r0 += chunk) {
    const std::int64_t r1 = std::min(last, r0 + chunk), p0 = r0 * window_.out_w, p1 = r1 * window_.out_w;
    Tensor y = y_.rows(p0, p1);
    Tensor z = keep ? z_.rows(p0, p1) : y;
    if (pointwise()) {
      ops::gemm(x2.rows(p0, p1), false, w, false, z);
    } else {
      Tensor col = columns_kept_ ? col_.rows(p0, p1) : column_rows(col_buffer, p1 - p0, x.device());
      ops::im2col(x, window_, r0, col);
      ops::gemm(col, false, w, false, z);
    }
    // z = x * kernel + bias stays (when kept) for GELU's gradient and as the logits of softmax/sigmoid.
    weights_.add_bias_and_activate(z, options_.use_bias, activation_, keep, y);
  }
}

Tensor Conv2D::logits() const {
  MDTRAIN_CHECK(keeps_preactivation(activation_), std::logic_error, "[", area_, "] layer \"", name_,
                "\" keeps no logits for activation ", name_of(activation_));
  return z_.reshape(output_dims(x_.dim(0)));
}

Tensor Conv2D::backward(const Tensor& dy, bool need_input_grad) {
  return backward_chunks(dy.reshape({-1, options_.filters}), activation_ != Activation::Linear, need_input_grad);
}

Tensor Conv2D::backward_from_logits(const Tensor& dlogits, bool need_input_grad) {
  return backward_chunks(dlogits.reshape({-1, options_.filters}), false, need_input_grad);
}

Tensor Conv2D::backward_chunks(const Tensor& grad, bool through_activation, bool need_input_grad) {
  const std::int64_t images = x_.dim(0), positions = window_.out_h * window_.out_w, rows = images * positions,
                     depth = window_.k_h * window_.k_w * window_.channels, filters = options_.filters;
  MDTRAIN_CHECK(grad.dim(0) == rows, std::invalid_argument, "[", area_, "] layer \"", name_,
                "\": the output gradient has ", grad.dim(0), " rows, the last forward produced ", rows);
  const Device& device = x_.device();
  Tensor dw = weights_.kernel.grad.reshape({depth, filters});
  if (need_input_grad) ensure_buffer(dx_, x_.shape(), dtype_, device);
  if (rows == 0) {
    weights_.kernel.grad.fill(0.0);
    if (options_.use_bias) weights_.bias.grad.fill(0.0);
    return need_input_grad ? input_gradient() : Tensor();
  }
  const std::int64_t chunk = output_rows_per_chunk(device);
  // Each run's gradients into its row of run_dw_ / run_db_ (one run: straight into the
  // gradients), then added up in run order.
  const std::int64_t macs = rows * depth * filters;
  const int runs = ops::conv2d_image_runs(
      device, images, macs,
      [&](int n) {
        last_runs_ = n;
        if (n == 1) return;
        ensure_buffer(run_dw_, {n, depth * filters}, dtype_, device);
        ensure_buffer(run_db_, {n, filters}, dtype_, device);
        run_col_.resize(static_cast<std::size_t>(n));
        run_dz_.resize(static_cast<std::size_t>(n));
      },
      [&](int r, std::int64_t first_image, std::int64_t last_image) {
        const std::int64_t first = first_image * window_.out_h, last = last_image * window_.out_h;
        if (last_runs_ == 1) {
          backward_rows(grad, through_activation, need_input_grad, first, last, chunk, dw, weights_.bias.grad, col_,
                        dz_);
          return;
        }
        const auto k = static_cast<std::size_t>(r);
        backward_rows(grad, through_activation, need_input_grad, first, last, chunk,
                      run_dw_.rows(r, r + 1).reshape({depth, filters}), run_db_.rows(r, r + 1).reshape({filters}),
                      r == 0 ? col_ : run_col_[k], r == 0 ? dz_ : run_dz_[k]);
      });
  if (runs > 1) {
    Tensor dw_flat = dw.reshape({depth * filters});
    ops::sum_rows(run_dw_, dw_flat);
    if (options_.use_bias) ops::sum_rows(run_db_, weights_.bias.grad);
  }
  if (need_input_grad) columns_kept_ = false;  // overwritten by the input-gradient columns
  return need_input_grad ? input_gradient() : Tensor();
}

void Conv2D::backward_rows(const Tensor& grad, bool through_activation, bool need_input_grad, std::int64_t first,
                           std::int64_t last, std::int64_t chunk, Tensor dw, Tensor db, Tensor& col_buffer,
                           Tensor& dz_buffer) {
  const std::int64_t images = x_.dim(0), rows = images * window_.out_h * window_.out_w,
                     depth = window_.k_h * window_.k_w * window_.channels, filters = options_.filters;
  const Device& device = x_.device();
  const Tensor w = weights_.kernel.value.reshape({depth, filters});
  const bool keep = keeps_preactivation(activation_);
  const std::int64_t out_rows = images * window_.out_h;
  const Tensor x2 = pointwise() ? x_.reshape({rows, depth}) : Tensor();
  Tensor dx2 = need_input_grad && pointwise() ? dx_.reshape({rows, depth}) : Tensor();
  // col2im adds each chunk onto dx, and neighbouring chunks may share input rows: input rows are
  // zeroed just before the first chunk that reaches them (chunks reach them in order), so the
  // zeroing stays in cache with the chunk. The rows start and end on whole images, whose input
  // rows no other run touches.
  Tensor dx_lines = need_input_grad ? dx_.reshape({images * window_.in_h, -1}) : Tensor();
  std::int64_t zeroed_lines = first / window_.out_h * window_.in_h;
  const std::int64_t last_line = last / window_.out_h * window_.in_h;
  for (std::int64_t r0 = first; r0 < last; r0 += chunk) {
    const std::int64_t r1 = std::min(last, r0 + chunk), p0 = r0 * window_.out_w, p1 = r1 * window_.out_w;
    const double beta = r0 == first ? 0.0 : 1.0;  // the first chunk overwrites the gradients, the others add
    Tensor dz = grad.rows(p0, p1);
    if (through_activation) {
      Tensor scratch = grown_rows(dz_buffer, p1 - p0, filters, dtype_, device);
      ops::activation_backward(activation_, keep ? z_.rows(p0, p1) : Tensor(), y_.rows(p0, p1), dz, scratch);
      dz = scratch;
    }
    if (options_.use_bias) ops::sum_rows(dz, db, beta);
    if (pointwise()) {
      ops::gemm(x2.rows(p0, p1), true, dz, false, dw, 1.0, beta);
      if (need_input_grad) {
        Tensor dx = dx2.rows(p0, p1);
        ops::gemm(dz, false, w, true, dx);
      }
      continue;
    }
    Tensor col = columns_kept_ ? col_.rows(p0, p1) : column_rows(col_buffer, p1 - p0, device);
    if (!columns_kept_) ops::im2col(x_, window_, r0, col);
    ops::gemm(col, true, dz, false, dw, 1.0, beta);
    if (need_input_grad) {
      // The columns are spent once the kernel gradient has them: their buffer takes d(columns).
      ops::gemm(dz, false, w, true, col);
      if (r0 == 0 && r1 == out_rows) {  // one chunk (always, on a GPU within its budget): dx whole
        ops::col2im(col, window_, dx_);
        zeroed_lines = last_line;
        continue;
      }
      // The last input row this chunk's windows reach, + 1 (the last output row reaches furthest).
      const std::int64_t b = (r1 - 1) / window_.out_h, oh = (r1 - 1) - b * window_.out_h;
      const std::int64_t reach = std::min(window_.in_h, math::window_start(oh, window_.stride_h, window_.pad_top) +
                                                            math::dilated_extent(window_.k_h, window_.dilation_h));
      const std::int64_t lines = b * window_.in_h + std::max<std::int64_t>(reach, 0);
      if (lines > zeroed_lines) {
        dx_lines.rows(zeroed_lines, lines).fill(0.0);
        zeroed_lines = lines;
      }
      ops::col2im_accumulate(col, window_, r0, dx_);
    }
  }
  if (need_input_grad && !pointwise() && zeroed_lines < last_line)
    dx_lines.rows(zeroed_lines, last_line).fill(0.0);  // rows no window reads
}

std::vector<Parameter*> Conv2D::parameters() { return weights_.parameters(built_, options_.use_bias); }

double Conv2D::regularization_loss() const { return weights_.regularization_loss(built_, options_.use_bias); }

void Conv2D::add_regularization_gradients() { weights_.add_regularization_gradients(options_.use_bias); }

std::unique_ptr<Layer> Conv2D::with_output_share(int shards, bool drop_activation) const {
  Options o = options_;
  o.filters /= shards;
  if (drop_activation) o.activation = "linear";
  return std::make_unique<Conv2D>(name_, o);
}

std::unique_ptr<Layer> Conv2D::clone() const {
  auto copy = std::make_unique<Conv2D>(name_, options_);
  copy_conv_state_to(*copy);
  return copy;
}

void Conv2D::copy_conv_state_to(Conv2D& copy) const {
  copy.copy_build_state(*this);
  copy.window_ = window_;
  copy.column_budget_bytes_ = column_budget_bytes_;
  copy.weights_.copy_values_from(weights_, built_, options_.use_bias);
}

Json Conv2D::config() const {
  Json c = Layer::config();
  c.set("filters", options_.filters);
  c.set("kernel_size", pair_to_json(options_.kernel_size));
  c.set("strides", pair_to_json(options_.strides));
  c.set("padding", options_.padding);
  c.set("data_format", options_.data_format);
  c.set("dilation_rate", pair_to_json(options_.dilation_rate));
  c.set("groups", 1);
  weights_.write_config(c, activation_, options_);
  c.set("activity_regularizer", Json());
  c.set("kernel_constraint", Json());
  c.set("bias_constraint", Json());
  return c;
}

std::unique_ptr<Layer> Conv2D::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  Options o;
  o.filters = c.at("filters").as_int();
  o.kernel_size = pair_from_json(c.at("kernel_size"));
  o.strides = pair_from_json(c.get("strides", Json(1)));
  o.padding = c.get("padding", "valid").as_string();
  o.data_format = c.get("data_format", "channels_last").as_string();
  o.dilation_rate = pair_from_json(c.get("dilation_rate", Json(1)));
  MDTRAIN_CHECK(c.get("groups", 1).as_int() == 1, std::invalid_argument, "[layers] Conv2D \"", name,
                "\": groups other than 1 are not supported");
  read_kernel_bias_config(c, o);
  return std::make_unique<Conv2D>(name, o);
}

}  // namespace mdtrain
