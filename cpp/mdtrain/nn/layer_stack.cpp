#include "mdtrain/nn/layer_stack.h"

#include <set>

namespace mdtrain {

void LayerStack::add(std::shared_ptr<Layer> layer) {
  MDTRAIN_CHECK(layer != nullptr, std::invalid_argument, "[sequential] cannot add a null layer");
  for (const auto& l : layers_)
    MDTRAIN_CHECK(l->name() != layer->name(), std::invalid_argument, "[sequential] a layer named \"", layer->name(),
                  "\" is already in the model; layer names must be unique");
  layers_.push_back(std::move(layer));
  if (built_) {
    // Keras lets a built Sequential grow: build the newcomer on the current output and repack.
    const std::size_t i = layers_.size() - 1;
    const Shape shape = layers_[i - 1]->output_shape();
    try {
      layers_[i]->build(shape, layer_seed(seed_, i), dtype_);
    } catch (...) {
      layers_.pop_back();
      throw;
    }
    pack_parameters();
  }
}

std::uint64_t LayerStack::layer_seed(std::uint64_t seed, std::size_t index) {
  // Distinct, well-mixed seed per layer position (splitmix64 step).
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void LayerStack::build(const Shape& input_shape, std::uint64_t seed, DType dtype) {
  MDTRAIN_CHECK(!layers_.empty(), std::invalid_argument, "[sequential] cannot build a model with no layers");
  Shape shape = input_shape;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->build(shape, layer_seed(seed, i), dtype);
    shape = layers_[i]->output_shape();
  }
  seed_ = seed;
  input_shape_ = input_shape;
  dtype_ = dtype;
  built_ = true;
  pack_parameters();
}

Shape LayerStack::output_shape() const {
  MDTRAIN_CHECK(built_, std::logic_error, "[sequential] the model is not built yet");
  return layers_.back()->output_shape();
}

void LayerStack::pack_parameters() {
  ParameterList trainable = trainable_parameters(), fixed = non_trainable_parameters();
  std::int64_t total = 0, fixed_total = 0;
  for (auto* p : trainable) total += p->value.numel();
  for (auto* p : fixed) fixed_total += p->value.numel();
  padded_values_ = Tensor::zeros({total + kPackedPadding}, dtype_, device_);
  padded_grads_ = Tensor::zeros({total + kPackedPadding}, dtype_, device_);
  packed_values_ = padded_values_.rows(0, total);
  packed_grads_ = padded_grads_.rows(0, total);
  non_trainable_values_ = Tensor::zeros({fixed_total}, dtype_, device_);
  first_grad_element_.clear();
  std::int64_t first = 0;
  for (auto& layer : layers_) {
    first_grad_element_.push_back(first);
    for (auto* p : layer->parameters())
      if (p->trainable) first += p->value.numel();
  }
  std::int64_t offset = 0;
  for (auto* p : trainable) {
    const std::int64_t n = p->value.numel();
    Tensor value = packed_values_.rows(offset, offset + n).reshape(p->value.shape());
    value.copy_from(p->value);
    p->value = value;
    p->grad = packed_grads_.rows(offset, offset + n).reshape(p->value.shape());
    offset += n;
  }
  offset = 0;
  for (auto* p : fixed) {
    const std::int64_t n = p->value.numel();
    Tensor value = non_trainable_values_.rows(offset, offset + n).reshape(p->value.shape());
    value.copy_from(p->value);
    p->value = value;
    p->grad = Tensor();  // nothing may write a gradient the optimizer would never read
    offset += n;
  }
}

Tensor LayerStack::forward(const Tensor& x, const ForwardContext& ctx) {
  MDTRAIN_CHECK(built_, std::logic_error, "[sequential] the model is not built yet");
  Tensor h = x;
  for (auto& layer : layers_) h = layer->forward(h, ctx);
  return h;
}

void LayerStack::layer_done(std::size_t i, const GradientsFinal& on_final) const {
  if (on_final) on_final(first_grad_element_[i]);
}

void LayerStack::backward(const Tensor& dy, const GradientsFinal& on_final) {
  Tensor g = dy;
  for (std::size_t i = layers_.size(); i-- > 0;) {
    g = layers_[i]->backward(g, i > 0);
    layer_done(i, on_final);
  }
}

void LayerStack::step_without_rows(const ForwardContext& ctx, const GradientsFinal& on_final) {
  MDTRAIN_CHECK(built_, std::logic_error, "[sequential] the model is not built yet");
  for (auto& layer : layers_) layer->forward_without_rows(ctx);
  for (std::size_t i = layers_.size(); i-- > 0;) {
    layers_[i]->backward_without_rows(i > 0);
    layer_done(i, on_final);
  }
}

Activation LayerStack::output_activation() const {
  return layers_.empty() ? Activation::Linear : layers_.back()->output_activation();
}

Tensor LayerStack::logits() const { return layers_.back()->logits(); }

void LayerStack::backward_from_logits(const Tensor& dlogits, const GradientsFinal& on_final) {
  const std::size_t last = layers_.size() - 1;
  Tensor g = layers_[last]->backward_from_logits(dlogits, last > 0);
  layer_done(last, on_final);
  for (std::size_t i = last; i-- > 0;) {
    g = layers_[i]->backward(g, i > 0);
    layer_done(i, on_final);
  }
}

ParameterList LayerStack::parameters() {
  ParameterList all;
  for (auto& layer : layers_)
    for (auto* p : layer->parameters()) all.push_back(p);
  return all;
}

ParameterList LayerStack::trainable_parameters() {
  ParameterList out;
  for (auto* p : parameters())
    if (p->trainable) out.push_back(p);
  return out;
}

ParameterList LayerStack::non_trainable_parameters() {
  ParameterList out;
  for (auto* p : parameters())
    if (!p->trainable) out.push_back(p);
  return out;
}

double LayerStack::regularization_loss() const {
  double l = 0;
  for (const auto& layer : layers_) l += layer->regularization_loss();
  return l;
}

void LayerStack::add_regularization_gradients() {
  for (auto& layer : layers_) layer->add_regularization_gradients();
}

std::unique_ptr<LayerStack> LayerStack::clone() const { return clone_to(device_); }

void LayerStack::check_device_support(const Device& device) const {
  if (device.is_cpu()) return;
  for (const auto& layer : layers_)
    MDTRAIN_CHECK(layer->has_cuda_kernels(), std::invalid_argument, "[layers] ", layer->class_name(), " (layer \"",
                  layer->name(), "\") has no CUDA kernels yet; train it on CPU devices, not ", device.to_string());
}

std::unique_ptr<LayerStack> LayerStack::clone_to(const Device& device) const {
  check_device_support(device);
  auto copy = std::make_unique<LayerStack>();
  copy->device_ = device;
  for (const auto& layer : layers_) copy->layers_.push_back(std::shared_ptr<Layer>(layer->clone()));
  copy->built_ = built_;
  copy->seed_ = seed_;
  copy->input_shape_ = input_shape_;
  copy->dtype_ = dtype_;
  if (built_) copy->pack_parameters();
  return copy;
}

}  // namespace mdtrain
