#pragma once
// A caching allocator over a slow raw allocator (cudaMalloc / cudaHostAlloc for the CUDA backend,
// which synchronise the device and cost tens of microseconds; any malloc-like pair in tests).
//
// Requests are rounded up to a size class; a freed block goes to its class's free list and the
// next request of that class reuses it without calling the raw allocator. When the raw allocator
// fails, every cached block is returned to it and the request is retried once before an
// AllocationError. Blocks come back as shared_ptr<void> whose deleter returns them to the cache;
// a block still held when the allocator is destroyed is handed to the raw free when its last owner
// drops it, so destruction order at shutdown does not matter.
//
// The cache does not know about streams: a GPU block freed while a kernel on the device's compute
// stream still uses it is safe to reuse only by later work on that same stream (which is where
// every mdtrain kernel and copy runs). Thread-safe.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace mdtrain {

class CachingAllocator {
 public:
  struct RawAllocator {
    // Returns nullptr when memory is exhausted; throws for any other failure.
    std::function<void*(std::size_t bytes)> allocate;
    // Must not throw (it runs in deleters and at shutdown).
    std::function<void(void* ptr)> free;
  };

  struct Stats {
    std::size_t in_use_bytes = 0;           // size classes of blocks held by users
    std::size_t cached_bytes = 0;           // size classes of blocks waiting in free lists
    std::size_t raw_allocations = 0;        // calls of the raw allocator that succeeded
    std::size_t raw_frees = 0;              // blocks given back to the raw allocator
    std::size_t cache_hits = 0;             // requests served from a free list
    std::size_t out_of_memory_retries = 0;  // times the cache was emptied to retry a request
  };

  // `where` names the memory in messages ("/device:GPU:0", "pinned host memory").
  CachingAllocator(std::string where, RawAllocator raw);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (a distinct block also for 0 bytes). Throws AllocationError
  // naming the size, `where` and the bytes in use when the raw allocator fails even after the
  // cache was emptied.
  std::shared_ptr<void> allocate(std::size_t bytes);
  // Gives every cached (free) block back to the raw allocator.
  void release_cached();
  Stats stats() const;

  // The size class of a request: multiples of 512 bytes below 1 MiB; above, four classes per
  // power of two (waste under 25%), so a training loop's repeating sizes hit the cache.
  static std::size_t size_class(std::size_t bytes);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace mdtrain
