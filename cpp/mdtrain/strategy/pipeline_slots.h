#pragma once
// A pipeline stage's state slots: clones of the stage that keep one in-flight micro-batch's
// activations each, while reading and writing the stage's own weights and gradients; and how the
// stage sums its micro-batches' gradients in them.
#include "mdtrain/core/tensor.h"
#include "mdtrain/nn/packed_parameters.h"

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

// One step's sum of a stage's micro-batches' gradients, as PipelineExecutor makes it (and the
// planner's stage timer, stage_timer.h, times it): in the stage's packed gradients themselves when
// every layer can add to them in backward (accumulates_in_backward: the first backward with rows
// overwrites, the others add), else in `buffer`, into which each micro-batch's gradients are copied
// or added (the same additions, in the same order).
class MicroBatchGradientSum {
 public:
  // `buffer`: kept across steps (its allocation is reused), on `memory`.
  MicroBatchGradientSum(const LayerStack& stage, Tensor& buffer, const Device& memory);
  // Before a micro-batch's backward through `layers` (its slot's, or the stage's).
  void before_backward(const LayerList& layers) const;
  // After it: `grads`, the stage's packed gradients, hold that micro-batch's (or the sum so far).
  void after_backward(const Tensor& grads);
  // Makes `grads` the sum (zeros when no micro-batch ran a backward).
  void finish(Tensor& grads) const;

 private:
  bool in_backward_;
  bool have_grads_ = false;
  Tensor& buffer_;
  Device memory_;
};

}  // namespace mdtrain
