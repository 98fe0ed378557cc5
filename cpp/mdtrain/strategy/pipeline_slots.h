#pragma once
// A pipeline stage's state slots: clones of the stage that keep one in-flight micro-batch's
// activations each, while reading and writing the stage's own weights and gradients.

namespace mdtrain {

class LayerStack;

// Makes `slot` (a clone of `stage`) read and write the stage's weights and gradients in place:
// its parameters' tensors and packed buffers become views of the stage's (its own copies freed).
// Re-taken every step, in case something replaced the stage's tensors.
void share_weights(LayerStack& stage, LayerStack& slot);

// True when every layer of `stack` that has trainable parameters can add its gradients to them in
// backward (Layer::supports_gradient_accumulation): the stage then sums its micro-batches' gradients
// in the packed gradients themselves, without a separate pass per micro-batch.
bool accumulates_in_backward(const LayerStack& stack);

// Sets every layer of `stack` to accumulate its gradients in backward, or to overwrite them.
void set_accumulate_gradients(LayerStack& stack, bool accumulate);

}  // namespace mdtrain
