#pragma once
// The index math of ops::strided_view (ops/strided_view.h), shared by its CPU loop and its CUDA
// kernel so that both read the same elements and add them in the same order.
#include <cstdint>

#include "mdtrain/core/hd.h"

namespace mdtrain::math {

// Dimensions a view may have: the layers need at most 6 (UpSampling2D's batch, rows, row
// repeats, columns, column repeats, channels); a fixed bound lets the plan travel to a CUDA
// kernel by value.
constexpr int kMaxViewRank = 8;

// The element offsets of the i-th index of a row-major iteration over `extent` (rank entries),
// in a tensor with `stride` per dimension (0: the same element again; any order: a transpose).
MDTRAIN_HD std::int64_t view_offset(std::int64_t i, int rank, const std::int64_t* extent, const std::int64_t* stride) {
  std::int64_t offset = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const std::int64_t n = extent[d];
    offset += (i % n) * stride[d];
    i /= n;
  }
  return offset;
}

// The sum of src over the reduced dimensions starting at src + base, in row-major order of
// reduce_extent (rank 0: the one element src[base]). What an adjoint of repeated reads
// (UpSampling's, RepeatVector's backward) writes per element.
template <class T>
MDTRAIN_HD T view_gather_sum(const T* src, std::int64_t base, int reduce_rank, const std::int64_t* reduce_extent,
                             const std::int64_t* reduce_stride, std::int64_t reduce_count) {
  if (reduce_rank == 0) return src[base];
  T sum = src[base + view_offset(0, reduce_rank, reduce_extent, reduce_stride)];
  for (std::int64_t r = 1; r < reduce_count; ++r)
    sum = sum + src[base + view_offset(r, reduce_rank, reduce_extent, reduce_stride)];
  return sum;
}

// A validated ops::ViewPlan in fixed arrays (passed by value to the CUDA kernel).
struct ViewArrays {
  int rank = 0;
  std::int64_t extent[kMaxViewRank] = {};
  std::int64_t src_stride[kMaxViewRank] = {};
  std::int64_t dst_stride[kMaxViewRank] = {};
  int reduce_rank = 0;
  std::int64_t reduce_extent[kMaxViewRank] = {};
  std::int64_t reduce_stride[kMaxViewRank] = {};
  std::int64_t count = 0;         // product of extent: the elements written
  std::int64_t reduce_count = 1;  // product of reduce_extent: the elements summed into each
  std::int64_t src_offset = 0;
  std::int64_t dst_offset = 0;
};

// Writes the i-th element of the view (0 <= i < v.count): one thread's or one loop step's work.
template <class T>
MDTRAIN_HD void view_element(const T* src, T* dst, std::int64_t i, const ViewArrays& v) {
  const std::int64_t from = v.src_offset + view_offset(i, v.rank, v.extent, v.src_stride);
  dst[v.dst_offset + view_offset(i, v.rank, v.extent, v.dst_stride)] =
      view_gather_sum(src, from, v.reduce_rank, v.reduce_extent, v.reduce_stride, v.reduce_count);
}

}  // namespace mdtrain::math
