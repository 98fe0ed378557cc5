// Measured memory per device: a CPU allocation is charged to the device of the thread's innermost
// DeviceMemoryScope (CPU:0 without one), its release credits that same device wherever it
// happens, peaks follow the most held at once until reset, and move_to_host takes an allocation
// off its device's account. Devices 40..43 are used so that nothing else in the test binary
// allocates on them.
#include <gtest/gtest.h>

#include <thread>

#include "mdtrain/core/memory_stats.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain {
namespace {

const Device kA{DeviceKind::CPU, 40}, kB{DeviceKind::CPU, 41};

TEST(MemoryStats, ChargesTheScopesDeviceAndCreditsItOnRelease) {
  const MemoryInfo a0 = memory_info(kA), b0 = memory_info(kB);
  Tensor held;
  {
    const DeviceMemoryScope on_a(kA);
    held = Tensor({1000}, DType::Float32);  // 4000 bytes, 64-byte aligned: 4032
    {
      const DeviceMemoryScope on_b(kB);
      Tensor t({16}, DType::Float64);  // 128 bytes on B, released at once
    }
    Tensor u({16}, DType::Float32);  // back on A: 64 bytes, released at once
  }
  EXPECT_EQ(memory_info(kA).current - a0.current, 4032);
  EXPECT_EQ(memory_info(kA).peak - a0.current, 4032 + 64);
  EXPECT_EQ(memory_info(kB).current, b0.current);
  EXPECT_EQ(memory_info(kB).peak - b0.current, 128);
  {
    // Released under another device's scope (and on another thread): still A's credit.
    const DeviceMemoryScope on_b(kB);
    std::thread([&] { held = Tensor(); }).join();
  }
  EXPECT_EQ(memory_info(kA).current, a0.current);
  EXPECT_EQ(memory_info(kB).current, b0.current);
}

TEST(MemoryStats, ResetSetsThePeakToTheCurrentBytes) {
  const Device c{DeviceKind::CPU, 42};
  const DeviceMemoryScope on_c(c);
  Tensor keep({64}, DType::Float32);  // 256 bytes
  { Tensor transient({4096}, DType::Float32); }
  EXPECT_GE(memory_info(c).peak, memory_info(c).current + 16384);
  reset_memory_stats(c);
  EXPECT_EQ(memory_info(c).peak, memory_info(c).current);
  { Tensor transient({32}, DType::Float32); }
  EXPECT_EQ(memory_info(c).peak, memory_info(c).current + 128);
}

TEST(MemoryStats, MoveToHostTakesAWholeAllocationOffItsDevice) {
  const Device d{DeviceKind::CPU, 43};
  const DeviceMemoryScope on_d(d);
  const std::int64_t host0 = host_memory_info().current, d0 = memory_info(d).current;
  Tensor weights({256}, DType::Float32);
  Tensor view = weights.rows(0, 128);
  move_to_host(view.storage());
  move_to_host(weights.storage());  // the same allocation: moved once
  EXPECT_EQ(memory_info(d).current, d0);
  EXPECT_EQ(host_memory_info().current - host0, 1024);
  weights = Tensor();
  view = Tensor();
  EXPECT_EQ(host_memory_info().current, host0);
  EXPECT_EQ(memory_info(d).current, d0);
}

TEST(MemoryStats, ThreadsWithoutAScopeChargeCpu0AndBadIndicesAreRefused) {
  const Device cpu0{DeviceKind::CPU, 0};
  std::int64_t before = 0, during = 0;
  std::thread([&] {
    before = memory_info(cpu0).current;
    Tensor t({1 << 20}, DType::UInt8);
    during = memory_info(cpu0).current;
  }).join();
  EXPECT_GE(during - before, 1 << 20);  // other threads of the binary may allocate too, not free ours
  EXPECT_THROW(DeviceMemoryScope(Device{DeviceKind::CPU, 100000}), std::invalid_argument);
  EXPECT_THROW(memory_info(Device{DeviceKind::CUDA, 100000}), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
