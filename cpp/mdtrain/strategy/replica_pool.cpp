#include "mdtrain/strategy/replica_pool.h"

#include <chrono>

#include "mdtrain/core/errors.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

namespace {
// About 200 us of spinning before a worker sleeps: longer than a step's gap inside an epoch,
// shorter than any Python callback worth the name.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

ReplicaPool::ReplicaPool(int replicas) : replicas_(replicas), errors_(static_cast<std::size_t>(replicas)) {
  MDTRAIN_CHECK(replicas >= 1, std::invalid_argument, "[replicas] need at least one replica, got ", replicas);
  for (int r = 1; r < replicas; ++r) workers_.emplace_back([this, r] { worker_loop(r); });
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ReplicaPool::run(const std::function<void(int)>& fn) {
  for (auto& e : errors_) e = nullptr;
  first_error_.store(-1, std::memory_order_relaxed);
  if (replicas_ == 1) {
    fn(0);
    return;
  }
  // BLAS threads are process-wide: single-threaded while the replicas run side by side. Set
  // before any worker wakes, or a worker's GEMM could split across threads and round differently.
  const int previous = ops::cpu_thread_count();
  if (previous != 1) ops::set_cpu_threads(1);
  task_ = &fn;
  pending_.store(replicas_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);  // pairs with the sleeping workers' predicate check
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  try {
    fn(0);
  } catch (...) {
    record_error(0);
  }
  while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
  if (previous != 1) ops::set_cpu_threads(previous);
  task_ = nullptr;
  const int first = first_error_.load(std::memory_order_acquire);
  if (first >= 0) std::rethrow_exception(errors_[static_cast<std::size_t>(first)]);
}

void ReplicaPool::record_error(int replica) {
  errors_[static_cast<std::size_t>(replica)] = std::current_exception();
  int none = -1;
  first_error_.compare_exchange_strong(none, replica, std::memory_order_acq_rel);
}

void ReplicaPool::worker_loop(int replica) {
  std::uint64_t seen = 0;
  for (;;) {
    auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
    while (generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < spin_until)
      cpu_relax();
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stopping_.load(std::memory_order_acquire)) return;
    try {
      (*task_)(replica);
    } catch (...) {
      record_error(replica);
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace mdtrain
