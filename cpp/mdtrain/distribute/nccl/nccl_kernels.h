#pragma once
// Kernels of the NCCL backend (nccl_kernels.cu), for what NCCL itself does not do as mdtrain's
// communicator contract requires.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "mdtrain/core/dtype.h"
#include "mdtrain/distribute/communicator.h"

namespace mdtrain::nccl_detail {

// out[i] = fold over r = 0..ranks-1 of gathered[r * rank_stride + offset + i] with op (Max or Min,
// NaN-propagating: math::fold_max / fold_min), for i < count; enqueued on `stream`. out may alias
// the gathered input of no rank.
void fold_ranks(const void* gathered, std::size_t rank_stride, std::size_t offset, std::size_t count, int ranks,
                DType dtype, ReduceOp op, void* out, cudaStream_t stream);

}  // namespace mdtrain::nccl_detail
