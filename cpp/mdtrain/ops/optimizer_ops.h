#pragma once
// Optimizer updates as ops: one call updates every segment of a step (a whole model when its
// parameters and slots are packed: one segment, one pass), on the host (ops/cpu/optimizer_kernels.h)
// or on one GPU (ops/cuda/optimizer_kernels.h), with the per-element rules of ops/optimizer_math.h
// and the same per-step scalars on both, so both give the bits the Keras-ordered formulas give.
// The optimizers of optim/ keep hyperparameters, slots, schedules, clipping factors and state, and
// call these once per step and (device, dtype).
//
// Every op validates before anything is written: dtype float32 or float64, sizes >= 0, value, grad
// and the slots the variant needs non-null on non-empty segments; a GPU device must be one this
// process can use. Failures throw std::invalid_argument("[ops] <op>: ..."). The pointers of all
// segments must be in `device`'s memory (not checked: they are raw). clip_value is clipvalue, or
// +inf when off; a segment clips when its grad_scale != 1 or clip_value is finite, and decays when
// its decay != 0.
#include <vector>

#include "mdtrain/core/device.h"
#include "mdtrain/core/dtype.h"
#include "mdtrain/ops/update_segment.h"

namespace mdtrain::ops {

// SGD. Slots: {momentum} when momentum > 0, else none.
void sgd_update(const Device& device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                double momentum, bool nesterov, double clip_value);
// Adam (AdamW: the same with decay). Slots: {momentum, velocity[, velocity_hat when amsgrad]};
// alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), t = iterations + 1.
void adam_update(const Device& device, DType dtype, const std::vector<UpdateSegment>& segments, double alpha,
                 double beta_1, double beta_2, double epsilon, bool amsgrad, double clip_value);
// RMSprop. Slots: {velocity[, momentum when momentum > 0][, average_gradient when centered]}.
void rmsprop_update(const Device& device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                    double rho, double momentum, double epsilon, bool centered, double clip_value);
// Adagrad. Slots: {accumulator}.
void adagrad_update(const Device& device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                    double epsilon, double clip_value);

}  // namespace mdtrain::ops
