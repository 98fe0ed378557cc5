#pragma once
// Backoff for a thread that waits on another thread's atomic store.
//
// Waking a blocked thread (futex, condition variable) costs ~75 us on the target VMs; a spinning
// waiter sees a store in well under 1 us. So waiters spin first, but ranks may outnumber cores
// (8 replicas on 2 cores), where a spinner would burn the time slice of the rank it waits for:
// after a short spin the waiter yields, and after a long wait it sleeps so that a slow peer (or
// Python between steps) gets the CPU.
#include <algorithm>
#include <chrono>
#include <thread>

namespace mdtrain::detail {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Whether `threads` that wait on each other all fit on the cores at once, so that a spinning
// waiter's peer can run meanwhile (SpinWait's may_spin; ThreadTeam's workers between runs).
inline bool fits_on_cores(long long threads) {
  return threads <= static_cast<long long>(std::max(1u, std::thread::hardware_concurrency()));
}

class SpinWait {
 public:
  using Clock = std::chrono::steady_clock;

  // Pure spinning only pays when the awaited thread can run meanwhile, i.e. when the threads
  // that wait on each other fit on the cores; otherwise the waiter yields from the start.
  explicit SpinWait(bool may_spin = true) : spins_(may_spin ? 0 : kSpins) {}

  // One waiting step. Returns false while still in the pure-spin phase (no clock read), true
  // once the caller should check its deadline and failure flags (each later step).
  bool step() {
    if (spins_ < kSpins) {
      ++spins_;
      cpu_relax();
      return false;
    }
    if (spins_ == kSpins) {
      ++spins_;
      start_ = Clock::now();
      return true;
    }
    if (Clock::now() - start_ < kYieldFor) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kSleep);
    }
    return true;
  }

 private:
  // A pause takes 30-140 ns on the target VMs (KVM may trap pause loops), so 256 of them are
  // ~10-30 us: a peer running on another core arrives well within that; one that is not
  // running needs this core, hence the yield after it.
  static constexpr unsigned kSpins = 256;
  static constexpr auto kYieldFor = std::chrono::milliseconds(2);
  static constexpr auto kSleep = std::chrono::microseconds(50);

  unsigned spins_ = 0;
  Clock::time_point start_{};
};

}  // namespace mdtrain::detail
