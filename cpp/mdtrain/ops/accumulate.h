#pragma once
// In-place accumulation of one tensor into another on its device: the pipeline's sum of its
// micro-batches' gradients (strategy/pipeline_executor.cpp) on host memory or on a GPU.
#include "mdtrain/core/tensor.h"

namespace mdtrain::ops {

// acc[i] += x[i] for every element, in element order on the CPU (one addition each: the same bits
// on both backends, math::accumulate). acc and x: the same floating dtype, element count and
// device (host, or one GPU). Throws std::invalid_argument("[add_into] ...") otherwise.
void add_into(Tensor& acc, const Tensor& x);

}  // namespace mdtrain::ops
