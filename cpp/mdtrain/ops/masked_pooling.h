#pragma once
// The validated op API of the masked mean over steps (GlobalAveragePooling1D reading a mask).
// Masks live on the host (nn/sequence_mask.h), so these run on CPU tensors only and refuse
// others naming the op.
#include <cstdint>
#include <vector>

#include "mdtrain/core/tensor.h"

namespace mdtrain::ops {

// y[b, c] = mean of x[b, t, c] over the steps t with mask[b * steps + t] != 0 (ops/
// masked_pooling_math.h). x is (batch, steps, channels), y holds batch * channels values, mask
// batch * steps bytes.
void masked_mean_steps(const Tensor& x, const std::vector<std::uint8_t>& mask, Tensor& y);
// dx (batch, steps, channels) of masked_mean_steps from dy (batch * channels values).
void masked_mean_steps_backward(const Tensor& dy, const std::vector<std::uint8_t>& mask, Tensor& dx);

}  // namespace mdtrain::ops
