#include "mdtrain/core/threading/thread_team.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>

#include "mdtrain/core/errors.h"
#include "mdtrain/core/threading/spin_wait.h"

namespace mdtrain::cpu {

namespace {
// About 200 us of spinning before a worker sleeps: longer than a step's gap inside an epoch,
// shorter than any Python callback worth the name.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(200);
}  // namespace

ThreadTeam::ThreadTeam(int members) : members_(members), may_spin_(detail::fits_on_cores(members)) {
  MDTRAIN_CHECK(members >= 1, std::invalid_argument, "[threads] a team needs at least one member, got ", members);
  MDTRAIN_CHECK(members <= max_threads(), std::invalid_argument, "[threads] a team of ", members,
                " members exceeds the limit of ", max_threads(), " threads (max(4 x ",
                std::max(1u, std::thread::hardware_concurrency()), " cores, 256))");
  errors_.resize(static_cast<std::size_t>(members));  // after the checks: a negative count sizes nothing
  for (int r = 1; r < members; ++r) workers_.emplace_back([this, r] { worker_loop(r); });
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadTeam::run(const std::function<void(int)>& fn) {
  for (auto& e : errors_) e = nullptr;
  first_error_.store(-1, std::memory_order_relaxed);
  if (members_ == 1) {
    fn(0);
    return;
  }
  // One thread per member while they run side by side. Set before any worker wakes, so no
  // member's op splits (its results would then depend on when the others started).
  const int previous = intra_op_threads();
  if (previous != 1) set_intra_op_threads(1);
  task_ = &fn;
  pending_.store(members_ - 1, std::memory_order_relaxed);
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
  detail::SpinWait wait(may_spin_);
  while (pending_.load(std::memory_order_acquire) != 0) wait.step();
  if (previous != 1) set_intra_op_threads(previous);
  task_ = nullptr;
  const int first = first_error_.load(std::memory_order_acquire);
  if (first >= 0) std::rethrow_exception(errors_[static_cast<std::size_t>(first)]);
}

void ThreadTeam::record_error(int member) {
  errors_[static_cast<std::size_t>(member)] = std::current_exception();
  int none = -1;
  first_error_.compare_exchange_strong(none, member, std::memory_order_acq_rel);
}

void ThreadTeam::worker_loop(int member) {
  std::uint64_t seen = 0;
  for (;;) {
    // Members outnumbering the cores: a spinning worker would take the core of a member (or of
    // Python between steps) that still has work, so it sleeps at once.
    auto spin_until = std::chrono::steady_clock::now() + (may_spin_ ? kSpinBeforeSleep : std::chrono::microseconds(0));
    while (generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < spin_until)
      detail::cpu_relax();
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stopping_.load(std::memory_order_acquire)) return;
    try {
      (*task_)(member);
    } catch (...) {
      record_error(member);
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

namespace {
std::atomic<int> intra_op_thread_count{std::max(1, static_cast<int>(std::thread::hardware_concurrency()))};
std::mutex intra_op_mutex;  // guards the team's creation, resizing and use
std::unique_ptr<ThreadTeam> intra_op;
thread_local int serial_scopes = 0;  // SerialOpsOnThisThread alive on this thread
}  // namespace

int intra_op_threads() { return serial_scopes > 0 ? 1 : intra_op_thread_count.load(std::memory_order_acquire); }

SerialOpsOnThisThread::SerialOpsOnThisThread() { ++serial_scopes; }
SerialOpsOnThisThread::~SerialOpsOnThisThread() { --serial_scopes; }

int max_threads() {
  static const int limit = std::max(256, 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return limit;
}

void set_intra_op_threads(int threads) {
  MDTRAIN_CHECK(threads >= 1 && threads <= max_threads(), std::invalid_argument,
                "[threads] the intra-op thread count must be from 1 to ", max_threads(), " (max(4 x the ",
                std::max(1u, std::thread::hardware_concurrency()), " cores, 256)), got ", threads);
  intra_op_thread_count.store(threads, std::memory_order_release);
}

ThreadTeam* acquire_intra_op_team() {
  const int threads = intra_op_threads();
  if (threads <= 1) return nullptr;
  if (!intra_op_mutex.try_lock()) return nullptr;  // in use by another op: run serially
  if (!intra_op || intra_op->size() != threads) {
    try {
      intra_op = std::make_unique<ThreadTeam>(threads);
    } catch (...) {
      intra_op_mutex.unlock();
      throw;
    }
  }
  return intra_op.get();
}

void release_intra_op_team() { intra_op_mutex.unlock(); }

}  // namespace mdtrain::cpu
