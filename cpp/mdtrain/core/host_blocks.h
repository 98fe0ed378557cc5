#pragma once
// Host memory blocks for tensors. Large ones are put on transparent huge pages: a training step
// streams its weights, gradients and optimizer slots (tens of MB for a large model) through GEMMs,
// the update and collectives, and on 4 KB pages every 4 KB of that costs a TLB miss and, when MPI
// copies a gradient between processes (process_vm_readv), a page walk of its own. Measured on
// 2 MPI processes, a 23 MB gradient's all-reduce took 4.2-4.9 ms on 4 KB pages and 2.3-2.4 ms on
// huge pages, and the heavy MLP's step (784-2048-2048-10, batch 64) 20.9 ms against 17.4 ms.
// NumPy does the same for its arrays of 4 MB and more.
#include <cstddef>

namespace mdtrain {

// Every host block is aligned to a cache line at least (whole AVX-512 vectors).
inline constexpr std::size_t kCacheLineBytes = 64;

// From this size a host block starts on a huge page boundary, spans whole huge pages and is
// advised to the kernel as huge-page memory (MADV_HUGEPAGE; whether the kernel backs it with huge
// pages is its setting: /sys/kernel/mm/transparent_hugepage/enabled).
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
inline constexpr std::size_t kHugePageThreshold = std::size_t{4} << 20;

// A block of at least `bytes` (64-byte aligned; from kHugePageThreshold, as above unless the
// environment variable MDTRAIN_HUGE_PAGES is "0"), to be freed with free_host_block; nullptr when
// the system has no memory for it.
void* allocate_host_block(std::size_t bytes);
void free_host_block(void* block);

}  // namespace mdtrain
