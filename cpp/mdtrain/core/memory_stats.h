#pragma once
// Measured memory per device: what tf.config.experimental.get_memory_info reports. Every
// allocate() charges the bytes it hands out to one device and its deleter credits that same
// device, so `current` is what a device holds now and `peak` the most it held since the last
// reset.
//
// Logical CPU devices share one heap, so a CPU allocation is charged to the device whose work the
// calling thread is doing: executors open a DeviceMemoryScope on each device's thread while it
// runs that device's step and while they build its weights, optimizer state and buffers. A thread
// with no scope charges /device:CPU:0 (the host, as in TensorFlow). A GPU allocation is charged to
// its GPU whatever the thread. Counters are relaxed atomics: a few nanoseconds per allocation.
//
// Memory that belongs to no device — the host's unsharded copy of a model whose devices hold
// shards — can be moved to the host's own account (move_to_host), reported by host_memory_info.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "mdtrain/core/device.h"

namespace mdtrain {

// Logical CPU devices whose memory is tracked: /device:CPU:0 .. CPU:255. Also the most logical CPU
// devices a process may have (mdtrain.config bounds MDTRAIN_NUM_CPU_DEVICES by it): each runs its
// replica on a thread of its own.
inline constexpr int kMaxCpuDevices = 256;

struct MemoryInfo {
  std::int64_t current = 0;  // bytes allocated now
  std::int64_t peak = 0;     // most bytes allocated at once since the last reset
};

// While it lives, CPU allocations on this thread are charged to `device` (a CPU device; a GPU
// device is accepted and changes nothing for CPU allocations). Nests; restores the previous
// device when destroyed. Throws std::invalid_argument for a device index beyond the tracked ones.
class DeviceMemoryScope {
 public:
  explicit DeviceMemoryScope(const Device& device);
  ~DeviceMemoryScope();
  DeviceMemoryScope(const DeviceMemoryScope&) = delete;
  DeviceMemoryScope& operator=(const DeviceMemoryScope&) = delete;

 private:
  int previous_;
};

// Throws std::invalid_argument("[memory] ...") for a device index beyond the tracked ones.
MemoryInfo memory_info(const Device& device);
// Sets the device's peak to its current bytes (TF's reset_memory_stats).
void reset_memory_stats(const Device& device);
MemoryInfo host_memory_info();

// Moves the whole allocation behind `storage` (one made by allocate()) from the device it was
// charged to onto the host's account; its deleter then credits the host. No-op for memory
// allocate() did not make or that is already the host's.
void move_to_host(const std::shared_ptr<void>& storage);

namespace memory_accounting {
// For allocate() only: charges `bytes` of a block to the slot of `device` (GPU) or of this thread's
// current device (CPU) and returns an owner of `block` whose deleter credits that slot and then
// frees the block with `free_block` (or drops `inner`, when the block belongs to another owner).
std::shared_ptr<void> charge(const Device& device, void* block, std::size_t bytes, void (*free_block)(void*),
                             std::shared_ptr<void> inner);
}  // namespace memory_accounting

}  // namespace mdtrain
