#pragma once
// Host optimizer updates over a list of segments (ops/update_segment.h): the per-element rules of
// ops/optimizer_math.h, in the order clip, decay, update, with every per-step scalar computed once
// per call (in double, then cast to T, as the GPU kernels of ops/cuda/optimizer_kernels.h do).
// Each segment runs a loop compiled for its combination of features (clipping, weight decay, and
// the optimizer's variant), so no element pays a branch for a feature that is off. The elements
// of all segments are cut into ranges over the intra-op threads (cpu::run_in_ranges): every
// element is updated by itself, so any cut gives the same bits. Called through
// ops/optimizer_ops.h, which validates the arguments.
#include <vector>

#include "mdtrain/core/dtype.h"
#include "mdtrain/ops/update_segment.h"

namespace mdtrain::cpu {

using ops::UpdateSegment;

// clip_value: clipvalue, or +inf when off. Slots as in ops/optimizer_ops.h.
void sgd_update(DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate, double momentum,
                bool nesterov, double clip_value);
void adam_update(DType dtype, const std::vector<UpdateSegment>& segments, double alpha, double beta_1, double beta_2,
                 double epsilon, bool amsgrad, double clip_value);
void rmsprop_update(DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate, double rho,
                    double momentum, double epsilon, bool centered, double clip_value);
void adagrad_update(DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate, double epsilon,
                    double clip_value);

}  // namespace mdtrain::cpu
