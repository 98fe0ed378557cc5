#pragma once
// Runs of elements copied between two tensors at strides: how a piece of a tensor along one
// dimension is cut out of it or put back (tensor parallelism's shards and split activations).
// Host memory, a GPU, or one of each (one cudaMemcpy2D on the GPU's stream).
#include <cstdint>

#include "mdtrain/core/tensor.h"

namespace mdtrain::ops {

// For r < runs: dst's elements [dst_offset + r * dst_stride, + run) = src's
// [src_offset + r * src_stride, + run). Same dtype; every run inside its tensor, else
// std::invalid_argument("[ops] ...").
void copy_runs(const Tensor& src, std::int64_t src_offset, std::int64_t src_stride, Tensor& dst,
               std::int64_t dst_offset, std::int64_t dst_stride, std::int64_t runs, std::int64_t run);

}  // namespace mdtrain::ops
