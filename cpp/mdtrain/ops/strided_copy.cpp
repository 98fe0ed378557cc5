#include "mdtrain/ops/strided_copy.h"

#include <cstring>

#include "mdtrain/core/cuda/device_memory.h"

namespace mdtrain::ops {

namespace {
bool inside(const Tensor& t, std::int64_t offset, std::int64_t stride, std::int64_t runs, std::int64_t run) {
  return offset >= 0 && stride >= 0 && run >= 0 && (runs == 0 || offset + (runs - 1) * stride + run <= t.numel());
}
}  // namespace

void copy_runs(const Tensor& src, std::int64_t src_offset, std::int64_t src_stride, Tensor& dst,
               std::int64_t dst_offset, std::int64_t dst_stride, std::int64_t runs, std::int64_t run) {
  MDTRAIN_CHECK(src.dtype() == dst.dtype() && runs >= 0 && inside(src, src_offset, src_stride, runs, run) &&
                    inside(dst, dst_offset, dst_stride, runs, run),
                std::invalid_argument, "[ops] copy_runs: ", runs, " runs of ", run, " elements from offset ",
                src_offset, " (stride ", src_stride, ") of ", to_string(src.shape()), " ", name_of(src.dtype()),
                " to offset ", dst_offset, " (stride ", dst_stride, ") of ", to_string(dst.shape()), " ",
                name_of(dst.dtype()));
  if (runs == 0 || run == 0) return;
  const std::size_t elem = size_of(src.dtype());
  const auto* from = static_cast<const char*>(src.raw()) + static_cast<std::size_t>(src_offset) * elem;
  auto* to = static_cast<char*>(dst.raw()) + static_cast<std::size_t>(dst_offset) * elem;
  const std::size_t bytes = static_cast<std::size_t>(run) * elem;
  if (src.device().is_cpu() && dst.device().is_cpu()) {
    for (std::int64_t r = 0; r < runs; ++r)
      std::memcpy(to + static_cast<std::size_t>(r * dst_stride) * elem,
                  from + static_cast<std::size_t>(r * src_stride) * elem, bytes);
    return;
  }
  cuda::copy_strided(to, dst.device(), static_cast<std::size_t>(dst_stride) * elem, from, src.device(),
                     static_cast<std::size_t>(src_stride) * elem, bytes, static_cast<std::size_t>(runs));
}

}  // namespace mdtrain::ops
