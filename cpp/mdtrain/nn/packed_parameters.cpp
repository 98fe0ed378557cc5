#include "mdtrain/nn/packed_parameters.h"

#include "mdtrain/nn/network.h"

namespace mdtrain {

std::uint64_t layer_seed(std::uint64_t seed, std::size_t index) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::size_t weighted_before(const LayerList& layers, std::size_t end) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < end && i < layers.size(); ++i)
    if (!layers[i]->parameters().empty()) ++count;
  return count;
}

ParameterList parameters_of(const LayerList& layers) {
  ParameterList all;
  for (const auto& layer : layers)
    for (auto* p : layer->parameters()) all.push_back(p);
  return all;
}

ParameterList trainable_parameters_of(const LayerList& layers) {
  ParameterList out;
  for (auto* p : parameters_of(layers))
    if (p->trainable) out.push_back(p);
  return out;
}

ParameterList non_trainable_parameters_of(const LayerList& layers) {
  ParameterList out;
  for (auto* p : parameters_of(layers))
    if (!p->trainable) out.push_back(p);
  return out;
}

double regularization_loss_of(const LayerList& layers) {
  double l = 0;
  for (const auto& layer : layers)
    if (layer->trainable()) l += layer->regularization_loss();
  return l;
}

void add_regularization_gradients_of(const LayerList& layers) {
  for (const auto& layer : layers)
    if (layer->trainable()) layer->add_regularization_gradients();
}

void check_layers_device_support(const LayerList& layers, const Device& device) {
  if (device.is_cpu()) return;
  for (const auto& layer : layers)
    MDTRAIN_CHECK(layer->has_cuda_kernels(), std::invalid_argument, "[layers] ", layer->class_name(), " (layer \"",
                  layer->name(), "\") has no CUDA kernels yet; train it on CPU devices, not ", device.to_string());
}

void PackedParameters::pack(const LayerList& layers, DType dtype, const Device& device) {
  for (const auto& layer : layers) layer->apply_trainable();
  ParameterList trainable = trainable_parameters_of(layers), fixed = non_trainable_parameters_of(layers);
  std::int64_t total = 0, fixed_total = 0;
  for (auto* p : trainable) total += p->value.numel();
  for (auto* p : fixed) fixed_total += p->value.numel();
  padded_values = Tensor::zeros({total + Network::kPackedPadding}, dtype, device);
  padded_grads = Tensor::zeros({total + Network::kPackedPadding}, dtype, device);
  values = padded_values.rows(0, total);
  grads = padded_grads.rows(0, total);
  non_trainable = Tensor::zeros({fixed_total}, dtype, device);
  first_grad_element.clear();
  std::int64_t first = 0;
  for (const auto& layer : layers) {
    first_grad_element.push_back(first);
    for (auto* p : layer->parameters())
      if (p->trainable) first += p->value.numel();
  }
  std::int64_t offset = 0;
  for (auto* p : trainable) {
    const std::int64_t n = p->value.numel();
    Tensor value = values.rows(offset, offset + n).reshape(p->value.shape());
    value.copy_from(p->value);
    p->value = value;
    p->grad = grads.rows(offset, offset + n).reshape(p->value.shape());
    offset += n;
  }
  offset = 0;
  for (auto* p : fixed) {
    const std::int64_t n = p->value.numel();
    Tensor value = non_trainable.rows(offset, offset + n).reshape(p->value.shape());
    value.copy_from(p->value);
    p->value = value;
    p->grad = Tensor();  // nothing may write a gradient the optimizer would never read
    offset += n;
  }
  // A frozen layer's backward still writes its weights' gradients (it computes them as it always
  // does): they go to buffers of their own, outside the packed gradients the optimizer reads.
  for (const auto& layer : layers)
    if (!layer->trainable())
      for (auto* p : layer->parameters())
        p->grad = Tensor::zeros(p->value.shape(), p->value.dtype(), p->value.device());
}

}  // namespace mdtrain
