#pragma once
// What every Network does with its layers' weights, whatever connects the layers: the packed
// buffers of nn/network.h's contract, the weight lists, the penalties and the device check.
#include <cstdint>
#include <memory>
#include <vector>

#include "mdtrain/core/device.h"
#include "mdtrain/core/parameter.h"
#include "mdtrain/core/tensor.h"
#include "mdtrain/nn/layer.h"

namespace mdtrain {

using LayerList = std::vector<std::shared_ptr<Layer>>;

// The seed of the layer at `index` in a network seeded with `seed` (a splitmix64 step: distinct
// and well mixed per position, so one model seed initialises every layer differently). `index`
// counts only the layers with weights before it (weighted_before): a layer without weights
// (Flatten, Activation, Dropout, PipelineSplit...) draws nothing, as in Keras, so inserting one
// changes no initial weight; in a model without such layers it is the position, as it always was.
std::uint64_t layer_seed(std::uint64_t seed, std::size_t index);

// How many of layers[0, end) have weights (built layers: their parameters() are known).
std::size_t weighted_before(const LayerList& layers, std::size_t end);

// Every weight of `layers` in get_weights() order (layer by layer, each in Keras's order); the
// trainable ones in that order are the packed order.
ParameterList parameters_of(const LayerList& layers);
ParameterList trainable_parameters_of(const LayerList& layers);
ParameterList non_trainable_parameters_of(const LayerList& layers);
double regularization_loss_of(const LayerList& layers);
void add_regularization_gradients_of(const LayerList& layers);
// Throws std::invalid_argument("[layers] Conv2D has no CUDA kernels yet; train it on CPU
// devices") naming the first layer that cannot run on `device`. Any layer runs on a CPU device.
void check_layers_device_support(const LayerList& layers, const Device& device);

// The buffers of Network's contract for a list of layers: trainable values and gradients packed
// in layer order (with Network::kPackedPadding zeros after them), non-trainable values in a third
// buffer. pack() moves every weight into them (each Parameter becomes a view).
struct PackedParameters {
  void pack(const LayerList& layers, DType dtype, const Device& device);

  Tensor values, grads;                // the packed trainable parameters and their gradients
  Tensor padded_values, padded_grads;  // the same, followed by the padding
  Tensor non_trainable;
  // Per layer, the element of grads where its trainable parameters begin (where the next
  // layer's begin when it has none).
  std::vector<std::int64_t> first_grad_element;
};

}  // namespace mdtrain
