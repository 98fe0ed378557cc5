// The CUDA kernel of ops::add_into (ops/accumulate.h); its per-element math is the CPU loop's
// (ops/accumulate_math.h). Listed in ops/cuda/kernel_list.h.
#include <cstdint>

#include "mdtrain/core/cuda/check.h"
#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/ops/accumulate_math.h"
#include "mdtrain/ops/cuda/accumulate_kernels.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;
using detail::OnDevice;

namespace {

template <class T>
__global__ void add_into_kernel(T* acc, const T* x, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) acc[i] = math::accumulate(acc[i], x[i]);
}

}  // namespace

void add_into(Tensor& acc, const Tensor& x) {
  const std::int64_t n = acc.numel();
  if (n == 0) return;
  OnDevice on(acc);
  dispatch_floating(acc.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    add_into_kernel<T><<<blocks_for(n), kThreads, 0, on.stream>>>(acc.data<T>(), x.data<T>(), n);
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("add_into_kernel");
}

}  // namespace mdtrain::cuda
