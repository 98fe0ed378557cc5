// The caching allocator behind GPU (and pinned) memory, tested with a counting malloc in place of
// cudaMalloc: the caching logic is the same code the CUDA backend runs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "mdtrain/core/caching_allocator.h"
#include "mdtrain/core/errors.h"

namespace mdtrain {
namespace {

// malloc with a budget: returns nullptr (as cudaMalloc's out-of-memory) past `limit` bytes.
struct Budget {
  std::size_t limit = SIZE_MAX, used = 0, allocs = 0, frees = 0;
  std::map<void*, std::size_t> live;
};

CachingAllocator::RawAllocator counting(std::shared_ptr<Budget> b) {
  return {[b](std::size_t n) -> void* {
            if (b->used + n > b->limit) return nullptr;
            void* p = std::malloc(n);
            b->used += n;
            ++b->allocs;
            b->live[p] = n;
            return p;
          },
          [b](void* p) {
            ++b->frees;
            b->used -= b->live.at(p);
            b->live.erase(p);
            std::free(p);
          }};
}

TEST(CachingAllocator, SizeClassesRoundUpWithBoundedWaste) {
  EXPECT_EQ(CachingAllocator::size_class(0), 512u);
  EXPECT_EQ(CachingAllocator::size_class(1), 512u);
  EXPECT_EQ(CachingAllocator::size_class(512), 512u);
  EXPECT_EQ(CachingAllocator::size_class(513), 1024u);
  EXPECT_EQ(CachingAllocator::size_class(1u << 20), 1u << 20);
  EXPECT_EQ(CachingAllocator::size_class((1u << 20) + 1), (1u << 20) + (1u << 18));
  for (std::size_t n : {std::size_t(3) << 20, std::size_t(1234567), std::size_t(987654321)}) {
    const std::size_t c = CachingAllocator::size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c - n, n / 4) << n;
  }
}

TEST(CachingAllocator, FreedBlocksAreReusedWithoutTheRawAllocator) {
  auto b = std::make_shared<Budget>();
  CachingAllocator a("test memory", counting(b));
  void* first;
  {
    auto p = a.allocate(1000);
    first = p.get();
    EXPECT_EQ(a.stats().in_use_bytes, 1024u);
  }
  EXPECT_EQ(a.stats().in_use_bytes, 0u);
  EXPECT_EQ(a.stats().cached_bytes, 1024u);
  auto q = a.allocate(1024);  // same class
  EXPECT_EQ(q.get(), first);
  EXPECT_EQ(b->allocs, 1u);
  EXPECT_EQ(a.stats().cache_hits, 1u);
  auto r = a.allocate(1024);  // the cached block is taken: a new one
  EXPECT_NE(r.get(), q.get());
  EXPECT_EQ(b->allocs, 2u);
}

TEST(CachingAllocator, OutOfMemoryEmptiesTheCacheAndRetriesOnce) {
  auto b = std::make_shared<Budget>();
  b->limit = 4096;
  CachingAllocator a("/device:GPU:7", counting(b));
  { auto p = a.allocate(3000); }  // 3072 cached
  auto q = a.allocate(2000);      // 2048 does not fit beside the cached 3072: cache emptied, retried
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(a.stats().out_of_memory_retries, 1u);
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  EXPECT_EQ(b->frees, 1u);
  try {
    a.allocate(4000);
    ADD_FAILURE() << "no exception";
  } catch (const AllocationError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[allocator] cannot allocate 4000 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("/device:GPU:7"), std::string::npos) << msg;
  }
}

TEST(CachingAllocator, ReleaseAndDestructionReturnEverythingEvenBlocksHeldLonger) {
  auto b = std::make_shared<Budget>();
  std::shared_ptr<void> survivor;
  {
    CachingAllocator a("test memory", counting(b));
    std::vector<std::shared_ptr<void>> blocks;
    for (int i = 0; i < 5; ++i) blocks.push_back(a.allocate(100 * (i + 1)));
    survivor = blocks.back();
    blocks.clear();
    EXPECT_EQ(a.stats().cached_bytes, 512u * 4);
    a.release_cached();
    EXPECT_EQ(a.stats().cached_bytes, 0u);
    EXPECT_EQ(b->frees, 4u);
  }
  EXPECT_EQ(b->live.size(), 1u);  // the block still held outlives its allocator...
  survivor.reset();
  EXPECT_EQ(b->live.size(), 0u);  // ...and goes straight back to the raw allocator
}

}  // namespace
}  // namespace mdtrain
