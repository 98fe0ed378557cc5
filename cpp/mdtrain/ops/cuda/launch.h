#pragma once
// Launch helpers shared by the backend's .cu files (CUDA build only).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "mdtrain/core/cuda/staging.h"  // stage_to_device, copy_to_host
#include "mdtrain/core/cuda/stream.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain::cuda::detail {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items: enough to fill any current GPU, never more than the
// items need. Kernels loop, so any n fits.
inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(b, 4096)));
}

// The compute stream of a tensor's GPU, with that GPU made current (kernels launch on the current
// device).
struct OnDevice {
  explicit OnDevice(const Tensor& t) : guard(t.device().index), stream(compute_stream(t.device().index).handle()) {}
  explicit OnDevice(int device) : guard(device), stream(compute_stream(device).handle()) {}
  DeviceGuard guard;
  cudaStream_t stream;
};

}  // namespace mdtrain::cuda::detail
