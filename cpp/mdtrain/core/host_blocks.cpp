#include "mdtrain/core/host_blocks.h"

#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace mdtrain {

namespace {

bool huge_pages_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("MDTRAIN_HUGE_PAGES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return wanted;
}

}  // namespace

void* allocate_host_block(std::size_t bytes) {
  const bool huge = bytes >= kHugePageThreshold && huge_pages_wanted();
  const std::size_t align = huge ? kHugePageBytes : kCacheLineBytes;
  const std::size_t size = (bytes + align - 1) / align * align;  // aligned_alloc wants a multiple
  if (size < bytes) return nullptr;                              // overflow: no such block
  void* p = std::aligned_alloc(align, size);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice only: a kernel without transparent huge pages refuses it, and the block stays usable.
  if (p != nullptr && huge) (void)madvise(p, size, MADV_HUGEPAGE);
#endif
  return p;
}

void free_host_block(void* block) { std::free(block); }

}  // namespace mdtrain
