#include "mdtrain/core/caching_allocator.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "mdtrain/core/errors.h"

namespace mdtrain {

struct CachingAllocator::State {
  std::string where;
  RawAllocator raw;
  mutable std::mutex mutex;
  std::map<std::size_t, std::vector<void*>> free_lists;  // size class -> cached blocks
  Stats stats;
  bool closed = false;  // the allocator is gone: returned blocks go straight to raw.free

  // Called by a block's deleter.
  void give_back(void* ptr, std::size_t size) {
    std::unique_lock<std::mutex> lock(mutex);
    stats.in_use_bytes -= size;
    if (closed) {
      ++stats.raw_frees;
      lock.unlock();
      raw.free(ptr);
      return;
    }
    free_lists[size].push_back(ptr);
    stats.cached_bytes += size;
  }

  // Empties the free lists; the caller frees the returned blocks outside the lock.
  std::vector<void*> take_cached() {
    std::vector<void*> blocks;
    for (auto& [size, list] : free_lists) {
      blocks.insert(blocks.end(), list.begin(), list.end());
      stats.cached_bytes -= size * list.size();
      stats.raw_frees += list.size();
    }
    free_lists.clear();
    return blocks;
  }
};

namespace {
constexpr std::size_t kSmallQuantum = 512;
constexpr std::size_t kLargeThreshold = std::size_t(1) << 20;
}  // namespace

std::size_t CachingAllocator::size_class(std::size_t bytes) {
  if (bytes < kLargeThreshold) {
    const std::size_t n = bytes == 0 ? 1 : bytes;
    return (n + kSmallQuantum - 1) / kSmallQuantum * kSmallQuantum;
  }
  // Step = a quarter of the largest power of two <= bytes.
  std::size_t top = kLargeThreshold;
  while (top <= bytes / 2) top *= 2;
  const std::size_t step = top / 4;
  const std::size_t rounded = (bytes + step - 1) / step * step;
  if (rounded < bytes) fail<AllocationError>("[allocator] size overflow for ", bytes, " bytes");
  return rounded;
}

CachingAllocator::CachingAllocator(std::string where, RawAllocator raw) : state_(std::make_shared<State>()) {
  MDTRAIN_CHECK(raw.allocate && raw.free, std::invalid_argument,
                "[allocator] a caching allocator needs a raw allocate and free");
  state_->where = std::move(where);
  state_->raw = std::move(raw);
}

CachingAllocator::~CachingAllocator() {
  std::vector<void*> blocks;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->closed = true;
    blocks = state_->take_cached();
  }
  for (void* p : blocks) state_->raw.free(p);
}

std::shared_ptr<void> CachingAllocator::allocate(std::size_t bytes) {
  const std::size_t size = size_class(bytes);
  State& s = *state_;
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.free_lists.find(size);
    if (it != s.free_lists.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      s.stats.cached_bytes -= size;
      ++s.stats.cache_hits;
    }
  }
  if (!ptr) {
    ptr = s.raw.allocate(size);
    if (!ptr) {
      // Out of memory: give the cache back and try once more.
      std::vector<void*> blocks;
      {
        std::lock_guard<std::mutex> lock(s.mutex);
        ++s.stats.out_of_memory_retries;
        blocks = s.take_cached();
      }
      for (void* p : blocks) s.raw.free(p);
      ptr = s.raw.allocate(size);
    }
    if (!ptr) {
      const Stats st = stats();
      fail<AllocationError>("[allocator] cannot allocate ", bytes, " bytes (", bytes >> 20, " MiB) on ", s.where,
                            ": out of memory with ", st.in_use_bytes >> 20, " MiB in use by tensors");
    }
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.stats.raw_allocations;
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stats.in_use_bytes += size;
  }
  std::shared_ptr<State> keep = state_;
  return std::shared_ptr<void>(ptr, [keep, size](void* p) { keep->give_back(p, size); });
}

void CachingAllocator::release_cached() {
  std::vector<void*> blocks;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    blocks = state_->take_cached();
  }
  for (void* p : blocks) state_->raw.free(p);
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

}  // namespace mdtrain
