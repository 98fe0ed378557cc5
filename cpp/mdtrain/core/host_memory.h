#pragma once
// The host memory this process can still get, checked before a large host allocation. On Linux a
// too-large malloc rarely fails: memory is overcommitted, and the process is killed by the OOM
// killer (or its cgroup's) while the zeroed or initialized pages are first touched — minutes later
// and with nothing said. allocate() (core.cpp) therefore compares each host block of at least
// kLargeHostAllocation bytes with what is left and throws HostMemoryExhausted (a MemoryError in
// Python) naming the bytes and where the limit comes from.
//
// What is left is the smaller of
//   - MemAvailable of /proc/meminfo (the kernel's estimate of what can be had without swapping,
//     reclaimable caches included), and
//   - for the process's memory cgroup and each of its ancestors: the limit minus the working set
//     (usage minus inactive file cache, which the kernel reclaims before it kills: docker's and
//     kubelet's measure). cgroup v2: memory.max ("max": no limit) - memory.current; cgroup v1:
//     memory.limit_in_bytes (values from 2^62: no limit) - memory.usage_in_bytes. The cgroup
//     directories are found through /proc/self/cgroup and the mounts of /proc/self/mountinfo.
// A figure that cannot be read is left out; when none can, nothing is checked.
//
// Small allocations are never checked (no file is read for them): reading the figures took 0.4 ms
// here (cgroup v1, whose memory.stat is long), about 1 % of zeroing a 64 MiB block (36 ms): only
// blocks that large, rare and slow to fill anyway, can afford it.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "mdtrain/core/errors.h"

namespace mdtrain {

// Host blocks from this size are checked against the memory left.
inline constexpr std::size_t kLargeHostAllocation = std::size_t{64} << 20;

// Thrown when a host allocation is larger than the memory the process can still get; maps to
// Python's MemoryError. `requested` and `available` in bytes; `sources` says where `available`
// comes from ("MemAvailable 1.2 GiB; cgroup v2 /sys/fs/cgroup/job: memory.max 2.0 GiB, ...").
class HostMemoryExhausted : public AllocationError {
 public:
  HostMemoryExhausted(const std::string& what, std::uint64_t requested, std::uint64_t available, std::string sources)
      : AllocationError(what), requested(requested), available(available), sources(std::move(sources)) {}
  std::uint64_t requested, available;
  std::string sources;
};

// Where the figures are read: the real files by default; tests point these at their own copies.
// `root` is prefixed to the cgroup mount points found in the mountinfo file.
struct HostMemorySources {
  std::string meminfo = "/proc/meminfo";
  std::string self_cgroup = "/proc/self/cgroup";
  std::string mountinfo = "/proc/self/mountinfo";
  std::string root;
};

struct HostMemoryAvailable {
  std::optional<std::uint64_t> mem_available;    // MemAvailable, bytes
  std::optional<std::uint64_t> cgroup_headroom;  // the tightest cgroup's limit minus working set
  std::string cgroup_detail;                     // that cgroup's directory and figures
  // The smaller of the figures known; nullopt when none is.
  std::optional<std::uint64_t> bytes() const;
  // "MemAvailable 1.2 GiB; cgroup v1 /sys/fs/cgroup/memory/job: memory.limit_in_bytes 2.0 GiB, ..."
  std::string describe() const;
};

// Reads the figures now (a few small files).
HostMemoryAvailable read_host_memory(const HostMemorySources& sources);
// Reads them from the sources set by set_host_memory_sources (the real files unless a test set
// others).
HostMemoryAvailable read_host_memory();

// Replaces the sources check_host_allocation and read_host_memory() read; returns the previous ones.
HostMemorySources set_host_memory_sources(HostMemorySources sources);

// Throws HostMemoryExhausted("[allocator] ...") when `bytes` exceed what read_host_memory() says is
// left. allocate() calls it for blocks of at least kLargeHostAllocation only.
void check_host_allocation(std::size_t bytes);

// The parts, for tests.
// MemAvailable of a /proc/meminfo text, in bytes; nullopt when absent or malformed.
std::optional<std::uint64_t> parse_mem_available(const std::string& meminfo);
// A cgroup limit file's value: nullopt for "max" (v2) or a value from 2^62 (v1's "no limit",
// 9223372036854771712), and for anything unreadable.
std::optional<std::uint64_t> parse_cgroup_limit(const std::string& text);
// `n` bytes as people read them: "2.9 GiB", "64.0 MiB", "512 bytes".
std::string format_bytes(std::uint64_t n);

}  // namespace mdtrain
