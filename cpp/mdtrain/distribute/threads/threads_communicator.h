#pragma once
// The "threads" backend: N ranks inside one process (one per logical CPU device), sharing memory.
//
// create_group(n) returns one Communicator per rank; each must be driven by its own thread (one
// thread at a time per communicator). Ranks synchronise by spinning on atomics (with yield and
// sleep backoff when ranks outnumber cores), never by a blocking wake-up, which costs ~75 us here.
//
// Results are deterministic: every reduction adds the ranks' contributions in rank order
// 0..N-1, so the result is bitwise identical on every rank and in every run, whatever the
// thread timing. All-reduces split the work: rank r reduces the r-th chunk of every rank's
// buffer and writes the result into the r-th chunk of every rank's buffer.
//
// send/recv go through one mailbox per ordered pair of ranks (a queue of copies), so a send
// never waits and a schedule in which both neighbours send before they receive cannot deadlock.
//
// split() gives sub-groups of their own (fresh shared state), e.g. one per axis of a device mesh.
//
// Every collective also checks that all ranks called the same operation with the same count,
// dtype, op and root (else std::runtime_error naming both calls), and reports in a TimeoutError
// which ranks did not arrive and what they last entered.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/distribute/collective_kind.h"
#include "mdtrain/distribute/communicator.h"

namespace mdtrain {

class ThreadsCommunicator final : public Communicator {
 public:
  // n >= 1 communicators of one group; element r has rank r.
  static std::vector<std::unique_ptr<Communicator>> create_group(int n);

  ~ThreadsCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override;
  std::string backend() const override { return "threads"; }
  void abort(const std::string& reason) override;

  // Implementation details, defined in the .cpp: the state a group's ranks share, and one
  // rank's description of the collective it entered.
  struct Group;
  struct Call;

 protected:
  void do_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) override;
  void do_reduce(void* data, std::size_t count, DType dtype, ReduceOp op, int root) override;
  void do_broadcast(void* data, std::size_t count, DType dtype, int root) override;
  void do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype, ReduceOp op) override;
  void do_barrier() override;
  // Buffered: send copies into the (this rank -> peer) mailbox and returns; recv takes the
  // mailbox's oldest message, waiting on a condition variable (woken by the send, and every
  // millisecond to notice a failed group or the timeout).
  void do_send(const void* data, std::size_t count, DType dtype, int peer) override;
  void do_recv(void* data, std::size_t count, DType dtype, int peer) override;
  // Every rank's (color, key) through the group, then each new group gets fresh shared state
  // (three phases in all). The new groups share nothing with this one.
  std::unique_ptr<Communicator> do_split(int color, int key) override;

 private:
  ThreadsCommunicator(std::shared_ptr<Group> group, int rank);

  // Publishes this rank's call, waits for every rank to publish theirs (the first phase) and
  // checks that they all match.
  void begin(const Call& call);
  // Marks this rank as past one more phase and waits until every rank is.
  void arrive_and_wait();
  [[noreturn]] void time_out(unsigned long long target_phase);
  [[noreturn]] void throw_group_failure(bool entering);
  const Call& call_of(int rank) const;

  std::shared_ptr<Group> group_;
  int rank_;
  unsigned long long sends_ = 0, recvs_ = 0;    // point-to-point calls (for messages)
  unsigned long long seq_ = 0;                  // collectives this rank has entered
  unsigned long long phase_ = 0;                // phases this rank has passed
  CollectiveKind kind_ = CollectiveKind::None;  // the collective in progress
  bool deadline_set_ = false;
  std::chrono::steady_clock::time_point deadline_{};
};

}  // namespace mdtrain
