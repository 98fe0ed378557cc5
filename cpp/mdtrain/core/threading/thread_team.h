#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mdtrain::cpu {

// Runs one function per member, all at once: member 0 on the calling thread, member r > 0 on a
// persistent worker thread of its own. What runs replicas side by side (Strategy: one member per
// replica) and splits one CPU op over the cores (intra_op_team()). Workers spin briefly between
// runs (a blocking wake-up costs ~75 us on our VMs, a whole small training step ~100 us) and then
// sleep, so an idle team does not burn a core while Python runs callbacks. While the members run,
// intra_op_threads() is 1: N members on N cores do not split their ops further.
class ThreadTeam {
 public:
  // Throws std::invalid_argument("[threads] ...") unless 1 <= members <= max_threads(), before any
  // thread starts.
  explicit ThreadTeam(int members);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return members_; }
  // Calls fn(r) for every member concurrently and returns when all have finished. If any threw,
  // rethrows the exception thrown first (the cause; later ones are usually peers giving up).
  void run(const std::function<void(int)>& fn);

 private:
  void worker_loop(int member);
  void record_error(int member);

  int members_;
  bool may_spin_;  // the members fit on the cores: waiting for one another may spin
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  std::vector<std::exception_ptr> errors_;
  std::atomic<int> first_error_{-1};
  std::mutex mutex_;
  std::condition_variable wake_;
};

// The threads one CPU op may split its work over (TF's intra-op parallelism): every core by
// default, 1 while a ThreadTeam runs members side by side (each member is then one core's work).
// mdtrain splits its ops itself (GEMMs in blocks, Conv2D by images) and calls the BLAS
// single-threaded: OpenBLAS's own threads keep spinning after each call, and would fight the
// team's threads for the cores.
int intra_op_threads();
// Throws std::invalid_argument("[threads] ...") outside 1..max_threads().
void set_intra_op_threads(int threads);

// The most threads a team (a strategy's replicas, an op's split) may have: max(4 x the cores,
// 256). More only oversubscribe the cores (the members wait for one another), and a count from a
// typo or a hostile environment (MDTRAIN_CPU_THREADS=100000) would otherwise start that many
// threads, exhausting the machine's PID space for every process on it.
int max_threads();

// While one lives, intra_op_threads() is 1 on the thread that made it, and only there (other
// threads' ops keep splitting): for a loop of many small ops, where waking the team for each op
// costs more than the split saves (an RNN's time steps). Scopes nest.
class SerialOpsOnThisThread {
 public:
  SerialOpsOnThisThread();
  ~SerialOpsOnThisThread();
  SerialOpsOnThisThread(const SerialOpsOnThisThread&) = delete;
  SerialOpsOnThisThread& operator=(const SerialOpsOnThisThread&) = delete;
};

// For one CPU op split over the cores: a process-wide team of intra_op_threads() members. Returns nullptr when a split
// does not pay (one thread) or the team is already running (another op got there first): the caller then runs serially.
// Release with release_intra_op_team() on every path (IntraOpTeam does it).
ThreadTeam* acquire_intra_op_team();
void release_intra_op_team();

// Runs fn(begin, end) over [0, n) in contiguous ranges, one per intra-op thread (at most n), on
// the intra-op team when `worth_splitting` (the caller's judgement of the work) and the team is
// free; otherwise fn(0, n) on the calling thread. For work whose result does not depend on how
// [0, n) is cut (element-wise passes, independent images).
template <class F>
void run_in_ranges(std::int64_t n, bool worth_splitting, F&& fn);

class IntraOpTeam {
 public:
  // Takes the team only when the caller wants to split (`wanted`); get() is null otherwise.
  explicit IntraOpTeam(bool wanted) : team_(wanted ? acquire_intra_op_team() : nullptr) {}
  ~IntraOpTeam() {
    if (team_) release_intra_op_team();
  }
  IntraOpTeam(const IntraOpTeam&) = delete;
  IntraOpTeam& operator=(const IntraOpTeam&) = delete;
  ThreadTeam* get() const { return team_; }

 private:
  ThreadTeam* team_;
};

template <class F>
void run_in_ranges(std::int64_t n, bool worth_splitting, F&& fn) {
  const int wanted = worth_splitting ? static_cast<int>(std::min<std::int64_t>(intra_op_threads(), n)) : 1;
  IntraOpTeam team(wanted > 1);
  if (!team.get()) return fn(std::int64_t{0}, n);
  const int parts = std::min(wanted, team.get()->size());
  team.get()->run([&](int p) {
    if (p < parts) fn(n * p / parts, n * (p + 1) / parts);
  });
}

}  // namespace mdtrain::cpu
