#pragma once
// Grid-stride loop indices for the backend's kernels (.cu files only). The index type is 64-bit
// by default (tensors may exceed 2^31 elements); kernels that know every offset fits may use
// std::int32_t, whose division is several times cheaper on a GPU (conv_kernels.cu).
#include <cstdint>

namespace mdtrain::cuda::detail {

template <class I = std::int64_t>
__device__ inline I first_index() {
  return static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
}
template <class I = std::int64_t>
__device__ inline I grid_stride() {
  return static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
}

}  // namespace mdtrain::cuda::detail
