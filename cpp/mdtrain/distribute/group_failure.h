#pragma once
// How a group of ranks fails, the same way on every backend (threads, mpi, nccl): the first
// failure of the group is recorded (a timeout, an abort, a mismatch, a transport error; later
// ones are its consequences and are dropped), and every pending and later collective of the
// group then throws it, naming itself:
//
//   [threads] barrier #3 on rank 1 gave up, the group failed: rank 0 aborted the group: <reason>
//   [mpi] all_reduce #4 on rank 2 cannot run, the group failed earlier: <reason>
//
// as TimeoutError when the first failure was a timeout, else std::runtime_error. Timeouts are
// reported in one shape too (timed_out + missing_ranks):
//
//   all_reduce #2 on rank 0 timed out after 0.2 s: rank 3 did not arrive (rank 3 last entered barrier #1)
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "mdtrain/distribute/collective_kind.h"

namespace mdtrain {

class GroupFailure {
 public:
  // Records the group's first failure; returns false (and drops it) when one was recorded
  // before. Thread-safe.
  bool record(std::string reason, bool timeout);
  // Lock-free: cheap enough for a spinning waiter.
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The recorded failure ("" and false before any).
  std::string reason() const;
  bool is_timeout() const;

  // Throws the recorded failure as seen by collective `call` ("barrier #3", or a fuller
  // description) of `rank`: "[backend] <call> on rank <rank> cannot run, the group failed
  // earlier: <reason>" when the collective had not started (`entering`), else "... gave up, the
  // group failed: <reason>". `if_none` stands for the reason when nothing was recorded.
  [[noreturn]] void rethrow(const std::string& backend, const std::string& call, int rank, bool entering,
                            const std::string& if_none = "") const;

 private:
  mutable std::mutex mutex_;  // guards reason_ and timeout_ (written once, before failed_)
  std::atomic<bool> failed_{false};
  std::string reason_;
  bool timeout_ = false;
};

// One rank that a timed-out collective waited for, and what is known of it ("rank 3 last entered
// barrier #1", "rank 1 is in all_reduce #2 (moving data)": text beginning with "rank <r>").
struct MissingRank {
  int rank;
  std::string details;
};

// "<call> on rank <rank> timed out after <seconds> s"
std::string timed_out(const std::string& call, int rank, double seconds);
// "rank 3 did not arrive (rank 3 last entered barrier #1)", "ranks 1, 3 <verb> (<details>; <details>)"
std::string missing_ranks(const std::vector<MissingRank>& missing, const std::string& verb = "did not arrive");
// "rank 3 last entered barrier #1", or "rank 3 has entered no collective" for seq 0.
std::string last_entered(int rank, CollectiveKind kind, unsigned long long seq);

}  // namespace mdtrain
