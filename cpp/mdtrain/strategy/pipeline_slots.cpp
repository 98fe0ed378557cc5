#include "mdtrain/strategy/pipeline_slots.h"

#include "mdtrain/nn/layer_stack.h"

namespace mdtrain {

void share_weights(LayerStack& stage, LayerStack& slot) {
  for (std::size_t j = 0; j < stage.layers().size(); ++j) {
    auto from = stage.layers()[j]->parameters();
    auto to = slot.layers()[j]->parameters();
    for (std::size_t k = 0; k < from.size(); ++k) {
      to[k]->value = from[k]->value;
      to[k]->grad = from[k]->grad;
    }
  }
  slot.packed_values() = stage.packed_values();
  slot.packed_grads() = stage.packed_grads();
  slot.padded_values() = stage.padded_values();
  slot.padded_grads() = stage.padded_grads();
  slot.non_trainable_values() = stage.non_trainable_values();
}

bool accumulates_in_backward(const LayerStack& stack) {
  for (const auto& layer : stack.layers()) {
    if (layer->supports_gradient_accumulation()) continue;
    for (const Parameter* param : layer->parameters())
      if (param->trainable) return false;
  }
  return true;
}

void set_accumulate_gradients(LayerStack& stack, bool accumulate) {
  for (const auto& layer : stack.layers()) layer->set_accumulate_gradients(accumulate);
}

}  // namespace mdtrain
