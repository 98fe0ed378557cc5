#include "mdtrain/nn/layer_stack.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/nn/sequence_mask.h"

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
      layers_[i]->build(shape, layer_seed(seed_, weighted_before(layers_, i)), dtype_);
    } catch (...) {
      layers_.pop_back();
      throw;
    }
    pack_parameters();
  }
}

std::shared_ptr<Layer> LayerStack::pop() {
  MDTRAIN_CHECK(!layers_.empty(), std::invalid_argument, "[sequential] there are no layers in the model to pop");
  std::shared_ptr<Layer> last = std::move(layers_.back());
  layers_.pop_back();
  if (built_) {
    if (layers_.empty()) built_ = false;
    else pack_parameters();  // the remaining weights, packed without the popped layer's
  }
  return last;
}

void LayerStack::build(const Shape& input_shape, std::uint64_t seed, DType dtype) {
  MDTRAIN_CHECK(!layers_.empty(), std::invalid_argument, "[sequential] cannot build a model with no layers");
  Shape shape = input_shape;
  std::size_t weighted = 0;  // layers with weights so far: the seeds' index (layer_seed)
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->build(shape, layer_seed(seed, weighted), dtype);
    if (!layers_[i]->parameters().empty()) ++weighted;
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

Tensor LayerStack::forward(const Tensor& x, const ForwardContext& ctx) {
  MDTRAIN_CHECK(built_, std::logic_error, "[sequential] the model is not built yet");
  Tensor h = x, mask;  // mask: what h carries (nn/sequence_mask.h)
  for (auto& layer : layers_) {
    auto* masked = dynamic_cast<MaskedLayer*>(layer.get());
    if (masked != nullptr) masked->set_input_mask(mask);
    h = layer->forward(h, ctx);
    if (masked != nullptr) mask = masked->output_mask();
    else if (!passes_mask(*layer)) mask = Tensor();
  }
  output_mask_ = mask;
  return h;
}

bool LayerStack::output_masked() const {
  bool masked = false;
  for (const auto& layer : layers_) {
    const auto* reader = dynamic_cast<const MaskedLayer*>(layer.get());
    if (reader != nullptr) masked = reader->output_masked(masked);
    else if (!passes_mask(*layer)) masked = false;
  }
  return masked;
}

void LayerStack::backward(const Tensor& dy, const GradientsFinal& on_final) {
  Tensor g = dy;
  for (std::size_t i = layers_.size(); i-- > 0;) {
    g = layers_[i]->backward(g, i > 0);
    layer_done(i, on_final);
  }
}

void LayerStack::step_without_rows(const ForwardContext& ctx, const GradientsFinal& on_final) {
  forward_without_rows(ctx);
  backward_without_rows(on_final);
}

void LayerStack::forward_without_rows(const ForwardContext& ctx) {
  MDTRAIN_CHECK(built_, std::logic_error, "[sequential] the model is not built yet");
  for (auto& layer : layers_) layer->forward_without_rows(ctx);
}

void LayerStack::backward_without_rows(const GradientsFinal& on_final) {
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

std::vector<std::vector<int>> LayerStack::layer_readers() const {
  std::vector<std::vector<int>> readers(layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i)
    readers[i] = {i + 1 < layers_.size() ? static_cast<int>(i + 1) : kOutput};
  return readers;
}

std::vector<std::vector<int>> LayerStack::layer_inputs() const {
  std::vector<std::vector<int>> inputs(layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) inputs[i] = {static_cast<int>(i) - 1};  // -1: kNetworkInput
  return inputs;
}

std::vector<int> LayerStack::cut_points() const {
  std::vector<int> cuts;
  for (std::size_t p = 1; p < layers_.size(); ++p) cuts.push_back(static_cast<int>(p));
  return cuts;
}

std::unique_ptr<Network> LayerStack::with_layers(std::vector<std::shared_ptr<Layer>> layers) const {
  MDTRAIN_CHECK(built_, std::logic_error, "[layers] with_layers needs a built stack");
  MDTRAIN_CHECK(layers.size() == layers_.size(), std::invalid_argument, "[layers] with_layers got ", layers.size(),
                " layers for a stack of ", layers_.size());
  auto stack = std::make_unique<LayerStack>();
  for (auto& layer : layers) stack->add(std::move(layer));
  stack->build(input_shape_, 0, dtype_);
  return stack;
}

std::unique_ptr<LayerStack> LayerStack::clone() const { return clone_to(device_); }

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
