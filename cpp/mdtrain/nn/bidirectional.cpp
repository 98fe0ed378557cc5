#include "mdtrain/nn/bidirectional.h"

#include <cstring>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/nn/layer_factory.h"

namespace mdtrain {

namespace {

std::unique_ptr<RecurrentLayer> as_recurrent(std::unique_ptr<Layer> layer, const std::string& owner) {
  auto* recurrent = dynamic_cast<RecurrentLayer*>(layer.get());
  MDTRAIN_CHECK(recurrent != nullptr, std::invalid_argument, "[bidirectional] layer \"", owner,
                "\": the wrapped layer must be SimpleRNN, LSTM or GRU, got ", layer->class_name());
  layer.release();
  return std::unique_ptr<RecurrentLayer>(recurrent);
}

// Rows (batch, steps, width) of `from` into columns [offset, offset + width) of `to` (batch, steps,
// total), step t taken from step (flip ? steps - 1 - t : t); or the other way with `gather`.
void copy_columns(const Tensor& from, Tensor& to, std::int64_t batch, std::int64_t steps, std::int64_t width,
                  std::int64_t total, std::int64_t offset, bool flip, bool gather) {
  const std::size_t elem = size_of(from.dtype());
  const char* src = static_cast<const char*>(from.raw());
  char* dst = static_cast<char*>(to.raw());
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < steps; ++t) {
      const std::int64_t narrow = b * steps + (flip ? steps - 1 - t : t), wide = b * steps + t;
      if (!gather) std::memcpy(dst + (wide * total + offset) * elem, src + narrow * width * elem, width * elem);
      else std::memcpy(dst + narrow * width * elem, src + (wide * total + offset) * elem, width * elem);
    }
}

// Zeroes the rows (b, t) of x (batch, steps, width) where mask (batch, steps) is 0.
void zero_masked_steps(Tensor& x, const Tensor& mask) {
  const std::int64_t rows = mask.numel(), width = x.numel() / rows;
  const std::vector<std::uint8_t> read = mask_to_bytes(mask);
  dispatch_floating(x.dtype(), "bidirectional", [&](auto tag) {
    using T = decltype(tag);
    T* v = x.data<T>();
    for (std::int64_t r = 0; r < rows; ++r)
      if (!read[static_cast<std::size_t>(r)])
        for (std::int64_t j = 0; j < width; ++j) v[r * width + j] = T(0);
  });
}

bool known_merge_mode(const std::string& mode) {
  return mode == "concat" || mode == "sum" || mode == "mul" || mode == "ave";
}

}  // namespace

Bidirectional::Bidirectional(std::string name, std::unique_ptr<RecurrentLayer> forward_layer,
                             std::unique_ptr<RecurrentLayer> backward_layer, std::string merge_mode)
    : Layer(std::move(name)),
      forward_(std::move(forward_layer)),
      backward_(std::move(backward_layer)),
      merge_mode_(std::move(merge_mode)) {
  MDTRAIN_CHECK(known_merge_mode(merge_mode_), std::invalid_argument, "[bidirectional] layer \"", name_,
                "\": merge_mode=\"", merge_mode_, "\" is not supported (\"concat\", \"sum\", \"mul\" or \"ave\")");
  const auto& f = forward_->options();
  const auto& b = backward_->options();
  MDTRAIN_CHECK(f.go_backwards != b.go_backwards, std::invalid_argument, "[bidirectional] layer \"", name_,
                "\": backward_layer must have go_backwards opposite to the forward layer's");
  MDTRAIN_CHECK(f.return_sequences == b.return_sequences && f.units == b.units, std::invalid_argument,
                "[bidirectional] layer \"", name_,
                "\": the forward and backward layers must have the same units and return_sequences");
}

void Bidirectional::set_input_mask(const Tensor& mask) {
  mask_ = mask;
  forward_->set_input_mask(mask);
  backward_->set_input_mask(mask);
}

Shape Bidirectional::compute_output_shape(const Shape& input_shape) const {
  Shape out = forward_->compute_output_shape(input_shape);
  if (merge_mode_ == "concat") out.back() *= 2;
  return out;
}

void Bidirectional::build_weights(const Shape& input_shape, std::uint64_t seed) {
  forward_->build(input_shape, seed, dtype_);
  backward_->build(input_shape, seed ^ 0x9e3779b97f4a7c15ULL, dtype_);
}

Tensor Bidirectional::forward(const Tensor& x, const ForwardContext& ctx) {
  check_input(x);
  MDTRAIN_CHECK(x.device().is_cpu(), std::invalid_argument, "[bidirectional] layer \"", name_,
                "\" runs on CPU devices only for now");
  if (mask_.defined()) check_mask_shape(mask_, x.dim(0), x.dim(1), "bidirectional", name_);
  const Tensor yf = forward_->forward(x, ctx);
  const Tensor yb = backward_->forward(x, ctx);
  const bool seq = forward_->options().return_sequences;
  const std::int64_t batch = x.dim(0), steps = seq ? x.dim(1) : 1, u = forward_->options().units;
  Shape out = yf.shape();
  if (merge_mode_ == "concat") out.back() *= 2;
  ensure_buffer(y_, out, dtype_, x.device());
  if (merge_mode_ == "concat") {
    copy_columns(yf, y_, batch, steps, u, 2 * u, 0, false, false);
    copy_columns(yb, y_, batch, steps, u, 2 * u, u, seq, false);
  } else {
    yf_ = yf;
    ensure_buffer(yb_, yf.shape(), dtype_, x.device());
    copy_columns(yb, yb_, batch, steps, u, u, 0, seq, false);
    dispatch_floating(dtype_, "bidirectional", [&](auto tag) {
      using T = decltype(tag);
      const T *a = yf_.data<T>(), *b = yb_.data<T>();
      T* y = y_.data<T>();
      const std::int64_t n = y_.numel();
      if (merge_mode_ == "sum")
        for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
      else if (merge_mode_ == "mul")
        for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
      else
        for (std::int64_t i = 0; i < n; ++i) y[i] = (a[i] + b[i]) / T(2);
    });
  }
  if (seq && mask_.defined()) zero_masked_steps(y_, mask_);
  return y_;
}

Tensor Bidirectional::backward(const Tensor& dy, bool need_input_grad) {
  const bool seq = forward_->options().return_sequences;
  const std::int64_t batch = dy.dim(0), steps = seq ? dy.dim(1) : 1, u = forward_->options().units;
  Shape half = dy.shape();
  half.back() = u;
  ensure_buffer(dy_forward_, half, dtype_, dy.device());
  ensure_buffer(dy_backward_, half, dtype_, dy.device());
  Tensor g = dy;
  if (seq && mask_.defined()) {
    // Zeros at masked steps: nothing flows back from them.
    ensure_buffer(dy_masked_, dy.shape(), dtype_, dy.device());
    dy_masked_.copy_from(dy);
    zero_masked_steps(dy_masked_, mask_);
    g = dy_masked_;
  }
  if (merge_mode_ == "concat") {
    copy_columns(g, dy_forward_, batch, steps, u, 2 * u, 0, false, true);
    copy_columns(g, dy_backward_, batch, steps, u, 2 * u, u, seq, true);
  } else {
    ensure_buffer(dy_aligned_, half, dtype_, dy.device());
    dispatch_floating(dtype_, "bidirectional", [&](auto tag) {
      using T = decltype(tag);
      const T* d = g.data<T>();
      const T *a = yf_.data<T>(), *b = yb_.data<T>();
      T *da = dy_forward_.data<T>(), *db = dy_aligned_.data<T>();
      const std::int64_t n = g.numel();
      for (std::int64_t i = 0; i < n; ++i) {
        if (merge_mode_ == "sum") {
          da[i] = d[i];
          db[i] = d[i];
        } else if (merge_mode_ == "mul") {
          da[i] = d[i] * b[i];
          db[i] = d[i] * a[i];
        } else {
          da[i] = d[i] / T(2);
          db[i] = d[i] / T(2);
        }
      }
    });
    copy_columns(dy_aligned_, dy_backward_, batch, steps, u, u, 0, seq, false);
  }
  const Tensor dxf = forward_->backward(dy_forward_, need_input_grad);
  const Tensor dxb = backward_->backward(dy_backward_, need_input_grad);
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, dxf.shape(), dtype_, dxf.device());
  dispatch_floating(dtype_, "bidirectional", [&](auto tag) {
    using T = decltype(tag);
    const T *a = dxf.data<T>(), *b = dxb.data<T>();
    T* out = dx_.data<T>();
    for (std::int64_t i = 0; i < dx_.numel(); ++i) out[i] = a[i] + b[i];
  });
  return dx_;
}

std::vector<Parameter*> Bidirectional::parameters() {
  std::vector<Parameter*> all = forward_->parameters();
  for (Parameter* p : backward_->parameters()) all.push_back(p);
  return all;
}

double Bidirectional::regularization_loss() const {
  return forward_->regularization_loss() + backward_->regularization_loss();
}

void Bidirectional::add_regularization_gradients() {
  forward_->add_regularization_gradients();
  backward_->add_regularization_gradients();
}

std::unique_ptr<Layer> Bidirectional::clone() const {
  auto copy = std::make_unique<Bidirectional>(name_, as_recurrent(forward_->clone(), name_),
                                              as_recurrent(backward_->clone(), name_), merge_mode_);
  copy->copy_build_state(*this);
  return copy;
}

Json Bidirectional::config() const {
  Json c = Layer::config();
  c.set("layer", layer_to_config(*forward_));
  c.set("merge_mode", merge_mode_);
  c.set("backward_layer", layer_to_config(*backward_));
  return c;
}

std::unique_ptr<Layer> Bidirectional::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  // Keras writes merge_mode None as null (two outputs): refused below, not read as the default.
  const Json mode = c.contains("merge_mode") ? c.at("merge_mode") : Json("concat");
  MDTRAIN_CHECK(mode.is_string() && known_merge_mode(mode.as_string()), std::invalid_argument,
                "[bidirectional] layer \"", name, "\": merge_mode=", mode.dump(),
                " is not supported (\"concat\", \"sum\", \"mul\" or \"ave\"; None would give two outputs, and "
                "an mdtrain layer has one)");
  Json spec = c.at("layer");
  Json backward = c.get("backward_layer", Json());
  if (backward.is_null()) {
    // Keras: the forward copy is "forward_<name>", the backward one "backward_<name>".
    const std::string inner = spec.at("config").at("name").as_string();
    Json fc = spec.at("config");
    fc.set("name", inner.rfind("forward_", 0) == 0 ? inner : "forward_" + inner);
    Json bc = fc;
    bc.set("name", "backward_" + inner);
    bc.set("go_backwards", !fc.get("go_backwards", false).as_bool());
    spec.set("config", fc);
    backward = Json::object();
    backward.set("class_name", spec.at("class_name"));
    backward.set("config", bc);
  }
  return std::make_unique<Bidirectional>(name, as_recurrent(layer_from_config(spec), name),
                                         as_recurrent(layer_from_config(backward), name), mode.as_string());
}

std::int64_t Bidirectional::held_activation_bytes() const {
  return forward_->held_activation_bytes() + backward_->held_activation_bytes() +
         bytes_of({&mask_, &yf_, &yb_, &y_, &dy_masked_, &dy_forward_, &dy_backward_, &dy_aligned_, &dx_});
}

}  // namespace mdtrain
