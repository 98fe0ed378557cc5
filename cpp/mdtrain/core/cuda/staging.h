#pragma once
// Host <-> GPU copies the kernels' host code needs around a launch (CUDA build only: includes the
// CUDA runtime header). Defined by core/cuda/runtime.cpp.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

namespace mdtrain::cuda::detail {

// Copies `bytes` to `dst` on `device` through pinned staging memory: fill(staging) writes them on
// the host, then an asynchronous copy on the compute stream moves them. Two staging buffers per
// device alternate, so filling the next batch overlaps the copy of this one.
void stage_to_device(int device, void* dst, std::size_t bytes, const std::function<void(void*)>& fill);

// `bytes` of device memory copied to the host after the work already on `stream` (waits for it).
void copy_to_host(void* host, const void* device_ptr, std::size_t bytes, cudaStream_t stream);

}  // namespace mdtrain::cuda::detail
