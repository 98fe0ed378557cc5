#include "mdtrain/core/memory_stats.h"

#include <atomic>
#include <utility>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {

constexpr int kCpuSlots = kMaxCpuDevices, kGpuSlots = 64;
constexpr int kHostSlot = 0;  // then CPU:0 .. CPU:255, then GPU:0 .. GPU:63

struct alignas(64) Slot {
  std::atomic<std::int64_t> current{0};
  std::atomic<std::int64_t> peak{0};
};
Slot slots[1 + kCpuSlots + kGpuSlots];

int slot_of(const Device& device) {
  const int limit = device.is_cpu() ? kCpuSlots : kGpuSlots;
  MDTRAIN_CHECK(device.index >= 0 && device.index < limit, std::invalid_argument, "[memory] ", device.to_string(),
                ": memory is tracked for device indices below ", limit);
  return 1 + device.index + (device.is_cpu() ? 0 : kCpuSlots);
}

thread_local int current_cpu_slot = 1;  // CPU:0

void add(int slot, std::int64_t bytes) {
  Slot& s = slots[slot];
  const std::int64_t now = s.current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::int64_t peak = s.peak.load(std::memory_order_relaxed);
  while (now > peak && !s.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// The deleter of every block allocate() hands out: it knows the slot it must credit.
struct ChargedBlock {
  int slot;
  std::int64_t bytes;
  void (*free_block)(void*);
  std::shared_ptr<void> inner;
  void operator()(void* p) {
    slots[slot].current.fetch_sub(bytes, std::memory_order_relaxed);
    if (inner) inner.reset();
    else if (free_block) free_block(p);
  }
};

MemoryInfo info_of(int slot) {
  return {slots[slot].current.load(std::memory_order_relaxed), slots[slot].peak.load(std::memory_order_relaxed)};
}

}  // namespace

DeviceMemoryScope::DeviceMemoryScope(const Device& device) : previous_(current_cpu_slot) {
  const int slot = slot_of(device);
  if (device.is_cpu()) current_cpu_slot = slot;
}

DeviceMemoryScope::~DeviceMemoryScope() { current_cpu_slot = previous_; }

MemoryInfo memory_info(const Device& device) { return info_of(slot_of(device)); }

void reset_memory_stats(const Device& device) {
  Slot& s = slots[slot_of(device)];
  s.peak.store(s.current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

MemoryInfo host_memory_info() { return info_of(kHostSlot); }

void move_to_host(const std::shared_ptr<void>& storage) {
  auto* d = std::get_deleter<ChargedBlock>(storage);
  if (!d || d->slot == kHostSlot) return;
  slots[d->slot].current.fetch_sub(d->bytes, std::memory_order_relaxed);
  add(kHostSlot, d->bytes);
  d->slot = kHostSlot;
}

namespace memory_accounting {
std::shared_ptr<void> charge(const Device& device, void* block, std::size_t bytes, void (*free_block)(void*),
                             std::shared_ptr<void> inner) {
  const int slot = device.is_cpu() ? current_cpu_slot : slot_of(device);
  const auto n = static_cast<std::int64_t>(bytes);
  add(slot, n);
  // Should the control block fail to allocate, shared_ptr runs the deleter: credited and freed.
  return std::shared_ptr<void>(block, ChargedBlock{slot, n, free_block, std::move(inner)});
}
}  // namespace memory_accounting

}  // namespace mdtrain
