// The CUDA kernel of ops::strided_view (ops/strided_view.h); its index math is the CPU loop's
// (ops/strided_view_math.h). Listed in ops/cuda/kernel_list.h.
#include <cstdint>

#include "mdtrain/core/cuda/check.h"
#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"
#include "mdtrain/ops/cuda/strided_view_kernels.h"
#include "mdtrain/ops/strided_view_math.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;
using detail::OnDevice;

namespace {

template <class T>
__global__ void strided_view_kernel(const T* src, T* dst, math::ViewArrays v) {
  for (std::int64_t i = first_index(); i < v.count; i += grid_stride()) math::view_element(src, dst, i, v);
}

}  // namespace

void strided_view(const Tensor& src, Tensor& dst, const math::ViewArrays& v) {
  if (v.count == 0) return;
  OnDevice on(dst);
  dispatch_floating(dst.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    strided_view_kernel<T><<<blocks_for(v.count), kThreads, 0, on.stream>>>(src.data<T>(), dst.data<T>(), v);
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("strided_view_kernel");
}

}  // namespace mdtrain::cuda
