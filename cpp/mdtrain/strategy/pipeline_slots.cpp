#include "mdtrain/strategy/pipeline_slots.h"

#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/ops/accumulate.h"

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

MicroBatchGradientSum::MicroBatchGradientSum(const LayerStack& stage, Tensor& buffer, const Device& memory)
    : in_backward_(accumulates_in_backward(stage)), buffer_(buffer), memory_(memory) {}

void MicroBatchGradientSum::before_backward(const LayerList& layers) const {
  if (in_backward_)
    for (const auto& layer : layers) layer->set_accumulate_gradients(have_grads_);
}

void MicroBatchGradientSum::after_backward(const Tensor& grads) {
  if (!in_backward_) {
    if (!have_grads_) {
      ensure_buffer(buffer_, grads.shape(), grads.dtype(), memory_);
      buffer_.copy_from(grads);
    } else {
      ops::add_into(buffer_, grads);  // on the stage's device
    }
  }
  have_grads_ = true;  // in_backward_: the layers added this micro-batch's gradients to grads
}

void MicroBatchGradientSum::finish(Tensor& grads) const {
  if (!have_grads_) grads.fill(0.0);
  else if (!in_backward_) grads.copy_from(buffer_);  // else grads hold the sum already
}

}  // namespace mdtrain
