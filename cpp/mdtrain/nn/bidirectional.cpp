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

}  // namespace

Bidirectional::Bidirectional(std::string name, std::unique_ptr<RecurrentLayer> forward_layer,
                             std::unique_ptr<RecurrentLayer> backward_layer)
    : Layer(std::move(name)), forward_(std::move(forward_layer)), backward_(std::move(backward_layer)) {
  const auto& f = forward_->options();
  const auto& b = backward_->options();
  MDTRAIN_CHECK(f.go_backwards != b.go_backwards, std::invalid_argument, "[bidirectional] layer \"", name_,
                "\": backward_layer must have go_backwards opposite to the forward layer's");
  MDTRAIN_CHECK(f.return_sequences == b.return_sequences && f.units == b.units, std::invalid_argument,
                "[bidirectional] layer \"", name_,
                "\": the forward and backward layers must have the same units and return_sequences");
}

Shape Bidirectional::compute_output_shape(const Shape& input_shape) const {
  Shape out = forward_->compute_output_shape(input_shape);
  out.back() *= 2;
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
  const Tensor yf = forward_->forward(x, ctx);
  const Tensor yb = backward_->forward(x, ctx);
  const bool seq = forward_->options().return_sequences;
  const std::int64_t batch = x.dim(0), steps = seq ? input_shape_[0] : 1, u = forward_->options().units;
  Shape out{batch};
  for (auto d : output_shape_) out.push_back(d);
  ensure_buffer(y_, out, dtype_, x.device());
  copy_columns(yf, y_, batch, steps, u, 2 * u, 0, false, false);
  copy_columns(yb, y_, batch, steps, u, 2 * u, u, seq, false);
  return y_;
}

Tensor Bidirectional::backward(const Tensor& dy, bool need_input_grad) {
  const bool seq = forward_->options().return_sequences;
  const std::int64_t batch = dy.dim(0), steps = seq ? input_shape_[0] : 1, u = forward_->options().units;
  Shape half = dy.shape();
  half.back() = u;
  ensure_buffer(dy_forward_, half, dtype_, dy.device());
  ensure_buffer(dy_backward_, half, dtype_, dy.device());
  copy_columns(dy, dy_forward_, batch, steps, u, 2 * u, 0, false, true);
  copy_columns(dy, dy_backward_, batch, steps, u, 2 * u, u, seq, true);
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
                                              as_recurrent(backward_->clone(), name_));
  copy->copy_build_state(*this);
  return copy;
}

Json Bidirectional::config() const {
  Json c = Layer::config();
  c.set("layer", layer_to_config(*forward_));
  c.set("merge_mode", "concat");
  c.set("backward_layer", layer_to_config(*backward_));
  return c;
}

std::unique_ptr<Layer> Bidirectional::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  const Json mode = c.get("merge_mode", "concat");
  MDTRAIN_CHECK(mode.is_string() && mode.as_string() == "concat", std::invalid_argument, "[bidirectional] layer \"",
                name, "\": merge_mode=", mode.dump(), " is not supported yet (only \"concat\")");
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
                                         as_recurrent(layer_from_config(backward), name));
}

}  // namespace mdtrain
