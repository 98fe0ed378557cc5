#pragma once
// GPU memory as core sees it. Declared here, defined by the CUDA backend (core/cuda/runtime.cpp)
// or by its stub (ops/cuda/no_cuda.cpp, which throws std::runtime_error with
// cuda::unavailable_reason()), so core code never tests a build flag.
//
// Ordering: every copy, fill and kernel on a GPU is enqueued on that device's compute stream
// (core/cuda/stream.h). A copy whose destination is host memory returns once the data is there;
// a copy from pageable host memory returns once the source may be reused; everything else is
// asynchronous with respect to the host.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "mdtrain/core/device.h"
#include "mdtrain/core/dtype.h"

namespace mdtrain::cuda {

// `bytes` on GPU `device` from the device's caching allocator (core/caching_allocator.h).
// Throws AllocationError when the GPU is out of memory, std::invalid_argument for a device index
// that does not exist.
std::shared_ptr<void> allocate(const Device& device, std::size_t bytes);
// Page-locked host memory (what asynchronous host-to-device copies need), also cached.
std::shared_ptr<void> allocate_pinned(std::size_t bytes);

// Copies `bytes` between any two of host memory and GPU memory (also GPU to another GPU).
void copy(void* dst, const Device& dst_device, const void* src, const Device& src_device, std::size_t bytes);
// `rows` runs of `width` bytes: run r from src + r * src_pitch to dst + r * dst_pitch (one
// cudaMemcpy2D), between any two of host memory and GPU memory, ordered and synchronised as copy().
void copy_strided(void* dst, const Device& dst_device, std::size_t dst_pitch, const void* src, const Device& src_device,
                  std::size_t src_pitch, std::size_t width, std::size_t rows);
// Sets `bytes` of GPU memory to zero.
void zero(void* dst, const Device& device, std::size_t bytes);
// Sets `count` elements of `dtype` at `dst` on a GPU to `value` (converted as a static_cast would).
void fill(void* dst, const Device& device, DType dtype, std::int64_t count, double value);

struct MemoryStats {
  std::size_t in_use_bytes = 0;
  std::size_t cached_bytes = 0;
  std::size_t device_allocations = 0;  // cudaMalloc calls that succeeded
  std::size_t cache_hits = 0;
};
MemoryStats memory_stats(int device);
// Returns every cached, unused block of every GPU (and of pinned memory) to the driver. Also
// run at process exit.
void release_cached_memory();

}  // namespace mdtrain::cuda
