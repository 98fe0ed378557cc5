#pragma once
#include <cstddef>
#include <memory>

#include "mdtrain/core/device.h"

namespace mdtrain {

// Allocates `bytes` on `device`, aligned to 64 bytes on the CPU (one cache line, whole AVX-512
// vectors; large blocks on huge pages, host_blocks.h). Throws AllocationError naming the size and
// device when memory cannot be had.
std::shared_ptr<void> allocate(const Device& device, std::size_t bytes);

}  // namespace mdtrain
