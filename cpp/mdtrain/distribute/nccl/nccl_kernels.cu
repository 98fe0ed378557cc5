// The rank-order fold behind the NCCL backend's Max/Min of floating types: NCCL's own max/min use
// fmaxf/fminf, which drop NaN, while the communicator contract propagates it (a diverged replica
// must not be hidden). The fold is the one the host backends use (distribute/reduce_math.h).
#include <cstdint>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/nccl/nccl_kernels.h"
#include "mdtrain/distribute/reduce_math.h"
#include "mdtrain/core/cuda/check.h"

namespace mdtrain::nccl_detail {

namespace {

template <class T, bool kMax>
__global__ void fold_ranks_kernel(const T* gathered, std::size_t rank_stride, std::size_t offset, std::size_t count,
                                  int ranks, T* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    T acc = gathered[offset + i];
    for (int r = 1; r < ranks; ++r) {
      const T x = gathered[static_cast<std::size_t>(r) * rank_stride + offset + i];
      acc = kMax ? math::fold_max(acc, x) : math::fold_min(acc, x);
    }
    out[i] = acc;
  }
}

template <class T>
void launch(const void* gathered, std::size_t rank_stride, std::size_t offset, std::size_t count, int ranks,
            ReduceOp op, void* out, cudaStream_t stream) {
  const unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>(count / threads + 1 < 4096 ? count / threads + 1 : 4096);
  const T* in = static_cast<const T*>(gathered);
  if (op == ReduceOp::Max)
    fold_ranks_kernel<T, true>
        <<<blocks, threads, 0, stream>>>(in, rank_stride, offset, count, ranks, static_cast<T*>(out));
  else
    fold_ranks_kernel<T, false>
        <<<blocks, threads, 0, stream>>>(in, rank_stride, offset, count, ranks, static_cast<T*>(out));
  MDTRAIN_CUDA_CHECK_LAUNCH("fold_ranks_kernel");
}

}  // namespace

void fold_ranks(const void* gathered, std::size_t rank_stride, std::size_t offset, std::size_t count, int ranks,
                DType dtype, ReduceOp op, void* out, cudaStream_t stream) {
  if (count == 0) return;
  MDTRAIN_CHECK(op == ReduceOp::Max || op == ReduceOp::Min, std::invalid_argument,
                "[nccl] fold_ranks: only max and min are folded here");
  // Integers are folded by NCCL itself: only floats (NaN-propagating max/min) come here.
  dispatch_floating(dtype, "nccl", [&](auto tag) {
    launch<decltype(tag)>(gathered, rank_stride, offset, count, ranks, op, out, stream);
  });
}

}  // namespace mdtrain::nccl_detail
