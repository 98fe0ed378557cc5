#pragma once
// Fused optimizer updates on a GPU: one launch updates every parameter range of a bucket (a list of
// segments), with the per-element rules of ops/optimizer_math.h that the CPU optimizers in optim/
// call, and the same per-step scalars (computed once per step by the caller, in double, exactly
// as optim/*.cpp computes them). Segments with and without clipping or weight decay go to
// separately compiled kernels, as the CPU loops are, so a feature that is off costs nothing and
// changes no bits. Defined in optimizer_kernels.cu or by the stub no_cuda.cpp.
#include <cstdint>
#include <vector>

#include "mdtrain/core/dtype.h"

namespace mdtrain::cuda {

// One parameter's range: `size` elements of value, grad and each slot (device pointers of one
// GPU, already offset to the range's first element).
struct UpdateSegment {
  void* value = nullptr;
  const void* grad = nullptr;
  void* slots[3] = {nullptr, nullptr, nullptr};  // in the optimizer's slot_specs() order
  std::int64_t size = 0;
  double grad_scale = 1.0;  // clipnorm / global_clipnorm factor (1 when off)
  double decay = 0.0;       // weight_decay * learning_rate (0 when off for this parameter)
};

// Every function takes clip_value: clipvalue, or +inf when it is off.
// slots: {momentum} when momentum > 0, else none.
void sgd_update(int device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                double momentum, bool nesterov, double clip_value);
// slots: {momentum, velocity[, velocity_hat]}; alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t).
void adam_update(int device, DType dtype, const std::vector<UpdateSegment>& segments, double alpha,
                 double beta_1, double beta_2, double epsilon, bool amsgrad, double clip_value);
// slots: {velocity[, momentum][, average_gradient]}.
void rmsprop_update(int device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                    double rho, double momentum, double epsilon, bool centered, double clip_value);
// slots: {accumulator}.
void adagrad_update(int device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                    double epsilon, double clip_value);

}  // namespace mdtrain::cuda
