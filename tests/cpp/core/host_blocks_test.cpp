// Host blocks for tensors: from kHugePageThreshold a block starts on a huge page boundary and its
// mapping is advised as huge-page memory (the kernel's VmFlags "hg"), smaller blocks are 64-byte
// aligned, every byte asked for is usable, and the device's account is charged what the tensor
// holds (rounded to 64 bytes), not the block's tail to its last huge page.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "mdtrain/core/host_blocks.h"
#include "mdtrain/core/memory_stats.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain {
namespace {

// The VmFlags of the mapping holding `address`, from /proc/self/smaps ("" when not found).
std::string vm_flags_of(const void* address) {
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool kernel_has_transparent_huge_pages() { return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good(); }

TEST(HostBlocks, LargeBlocksStartOnAHugePageAndAreAdvisedAsHugePageMemory) {
  for (std::size_t bytes : {kHugePageThreshold, kHugePageThreshold + 12345, std::size_t{23298088}}) {
    void* p = allocate_host_block(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % kHugePageBytes, 0u) << bytes << " bytes";
    std::memset(p, 0x5a, bytes);  // every byte asked for is ours
    EXPECT_EQ(static_cast<unsigned char*>(p)[bytes - 1], 0x5a);
    if (kernel_has_transparent_huge_pages()) {
      const std::string flags = vm_flags_of(p);
      ASSERT_FALSE(flags.empty()) << "no mapping holds the block";
      EXPECT_NE((flags + " ").find(" hg "), std::string::npos) << bytes << " bytes: " << flags;
    }
    free_host_block(p);
  }
}

TEST(HostBlocks, SmallBlocksAreCacheLineAligned) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{64}, std::size_t{4000}, kHugePageThreshold - 64}) {
    void* p = allocate_host_block(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << bytes << " bytes";
    std::memset(p, 1, bytes);
    free_host_block(p);
  }
}

TEST(HostBlocks, ATensorOnHugePagesIsChargedWhatItHolds) {
  const Device device{DeviceKind::CPU, 44};  // nothing else in the test binary allocates on it
  const std::int64_t before = memory_info(device).current;
  {
    const DeviceMemoryScope on(device);
    Tensor big({1'500'001}, DType::Float32);  // 6'000'004 bytes: past the threshold
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big.raw()) % kHugePageBytes, 0u);
    EXPECT_EQ(memory_info(device).current - before, 6'000'064);  // rounded to 64 bytes only
  }
  EXPECT_EQ(memory_info(device).current, before);
}

}  // namespace
}  // namespace mdtrain
