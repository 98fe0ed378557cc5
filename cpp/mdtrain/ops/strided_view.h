#pragma once
// One op for the layers that only move data (Permute, RepeatVector, ZeroPadding, Cropping,
// UpSampling, nn/strided_view_layer.h): an N-d copy between two tensors, each read or written at
// its own per-dimension strides from an offset, optionally summing over further dimensions of the
// source. Transposes are permuted source strides, repeated reads are stride 0, padding and
// cropping are offsets into the larger tensor (the rest of a padded output is zero-filled by the
// caller), and the adjoint of a repeated read is a sum over the repeats. The same plan runs on the
// host or on one GPU (ops/strided_view_math.h is the shared index math).
//
// ops/strided_copy.h (copy_runs) stays the 2-D memcpy between memories (host to GPU): this op
// works within one memory, element by element, and adds.
#include <cstdint>
#include <string>
#include <vector>

#include "mdtrain/core/tensor.h"

namespace mdtrain::ops {

struct ViewPlan {
  std::vector<std::int64_t> extent;      // the iteration over dst's written elements
  std::vector<std::int64_t> src_stride;  // per entry of extent (0: read again)
  std::vector<std::int64_t> dst_stride;  // per entry of extent; distinct indices, distinct elements
  std::int64_t src_offset = 0;
  std::int64_t dst_offset = 0;
  // Dimensions summed over for each written element (the adjoint of stride-0 reads); empty: a copy.
  std::vector<std::int64_t> reduce_extent;
  std::vector<std::int64_t> reduce_src_stride;
};

// For every index i of plan.extent: dst[dst_offset + i . dst_stride] =
//   sum over r of plan.reduce_extent of src[src_offset + i . src_stride + r . reduce_src_stride],
// summed in row-major order of r (the same bits on the CPU and a GPU). Elements of dst outside
// the plan are left as they are. src and dst: the same floating dtype, one memory (host, or one
// GPU), not one storage (the op reads while it writes); every element read and written inside its
// tensor; strides >= 0; at most math::kMaxViewRank dimensions each; dst's strides must not write
// one element twice. Otherwise std::invalid_argument("[ops] strided_view: ...") naming the plan
// and the shapes.
void strided_view(const Tensor& src, Tensor& dst, const ViewPlan& plan);

// "extent [2, 3] src_stride [3, 1] ...": a plan as the messages print it.
std::string describe(const ViewPlan& plan);

}  // namespace mdtrain::ops
