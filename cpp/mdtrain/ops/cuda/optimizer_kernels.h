#pragma once
// Fused optimizer updates on a GPU: one launch updates every parameter range of a bucket (a list of
// segments), with the per-element rules of ops/optimizer_math.h that the host kernels of
// ops/cpu/optimizer_kernels.h run, and the same per-step scalars (computed once per call, in
// double, then cast, as the host kernels do). Called through ops/optimizer_ops.h. Segments with
// and without clipping or weight decay go to separately compiled kernels, as the host loops are,
// so a feature that is off costs nothing and changes no bits. Defined in optimizer_kernels.cu or by the stub
// no_cuda.cpp.
#include <cstdint>
#include <vector>

#include "mdtrain/core/dtype.h"
#include "mdtrain/ops/update_segment.h"

namespace mdtrain::cuda {

// The segments of ops/update_segment.h (device pointers of one GPU).
using ops::UpdateSegment;

// Every function takes clip_value: clipvalue, or +inf when it is off.
// slots: {momentum} when momentum > 0, else none.
void sgd_update(int device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                double momentum, bool nesterov, double clip_value);
// slots: {momentum, velocity[, velocity_hat]}; alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t).
void adam_update(int device, DType dtype, const std::vector<UpdateSegment>& segments, double alpha, double beta_1,
                 double beta_2, double epsilon, bool amsgrad, double clip_value);
// slots: {velocity[, momentum][, average_gradient]}.
void rmsprop_update(int device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                    double rho, double momentum, double epsilon, bool centered, double clip_value);
// slots: {accumulator}.
void adagrad_update(int device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                    double epsilon, double clip_value);

}  // namespace mdtrain::cuda
