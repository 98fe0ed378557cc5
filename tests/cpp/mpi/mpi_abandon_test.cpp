// A collective that rank 0 gives up while its pieces are in flight must leave no MPI request on
// the caller's buffers: the caller may free them as soon as the call throws (CI once saw rank 0
// crash in Open MPI's rendezvous send, reading an all_reduce buffer freed after an abort, and a
// peer's CMA read of it fail with EFAULT).
//
// The order is forced with the data phase hook and barriers on a second communicator, so the test
// does not depend on timing: rank 0 issues its first pieces, every peer has entered the data
// phase but issued nothing, rank 0 gives up (telling the peers), and only once rank 0 has thrown
// and revoked its buffers (PROT_NONE) do the peers post the matching pieces, then give up too and
// revoke theirs. More traffic then drives MPI progress. Had a request kept a caller buffer, its
// transfer would now touch revoked memory: a segfault here, or an EFAULT from a peer's CMA read.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/mpi/mpi_communicator.h"

namespace mdtrain::testing {
namespace {

// Caller memory that faults on any access once revoked (kept reserved, so nothing reuses it).
class RevocableBuffer {
 public:
  explicit RevocableBuffer(std::size_t floats) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    bytes_ = (floats * sizeof(float) + page - 1) / page * page;
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("[test] mmap failed");
    data_ = static_cast<float*>(p);
    for (std::size_t i = 0; i < floats; ++i) data_[i] = static_cast<float>(i % 251);
  }
  ~RevocableBuffer() { munmap(data_, bytes_); }
  RevocableBuffer(const RevocableBuffer&) = delete;
  RevocableBuffer& operator=(const RevocableBuffer&) = delete;

  float* data() { return data_; }
  void revoke() { ASSERT_EQ(mprotect(data_, bytes_, PROT_NONE), 0); }

 private:
  float* data_ = nullptr;
  std::size_t bytes_ = 0;
};

struct AbandonCase {
  const char* name;
  const char* kind;  // as messages name it
  // Runs the collective on `comm` with the buffers (1 MB per rank each).
  std::function<void(MpiCommunicator& comm, float* send, float* recv, std::size_t count)> run;
};

constexpr std::size_t kCount = (1u << 20) / sizeof(float);

std::vector<AbandonCase> abandon_cases() {
  return {
      {"AllReduce", "all_reduce",
       [](MpiCommunicator& c, float* send, float*, std::size_t n) { c.all_reduce(send, n, DType::Float32); }},
      {"ReduceToTheLastRank", "reduce",
       [](MpiCommunicator& c, float* send, float*, std::size_t n) {
         c.reduce(send, n, DType::Float32, ReduceOp::Sum, c.size() - 1);
       }},
      {"BroadcastFromTheLastRank", "broadcast",
       [](MpiCommunicator& c, float* send, float*, std::size_t n) {
         c.broadcast(send, n, DType::Float32, c.size() - 1);
       }},
      {"AllGather", "all_gather",
       [](MpiCommunicator& c, float* send, float* recv, std::size_t n) {
         c.all_gather(send, recv, n / static_cast<std::size_t>(c.size()), DType::Float32);
       }},
      {"ReduceScatter", "reduce_scatter",
       [](MpiCommunicator& c, float* send, float* recv, std::size_t n) {
         c.reduce_scatter(send, recv, n / static_cast<std::size_t>(c.size()), DType::Float32);
       }},
  };
}

class MpiAbandonedCollective : public ::testing::TestWithParam<AbandonCase> {};

// Makes rank 0 give up the collective on `comm` after issuing its first pieces, while every peer
// has entered the data phase and issued nothing; the peers issue theirs once rank 0 has thrown
// and `after_throw` ran on every rank (sync barrier #2).
void give_up_on_rank_zero(MpiCommunicator& comm, MpiCommunicator& sync) {
  comm.set_timeout(60);  // a peer that misses the give-up fails the test by timing out, not hanging
  sync.set_timeout(60);
  const bool gives_up = comm.rank() == 0;
  comm.set_data_phase_hook([&sync, gives_up](bool issued) {
    if (gives_up) {
      if (!issued) return false;
      sync.barrier();  // #1: every peer is in the data phase and has issued nothing
      return true;
    }
    if (issued) return false;
    sync.barrier();  // #1
    sync.barrier();  // #2: rank 0 threw and revoked its buffers
    return false;    // now issue the pieces rank 0 left pending
  });
}

// After the give-up: the messages, MPI progress on every rank while whatever rank 0 and its peers
// left pending completes, and the group stays failed.
void expect_given_up_and_progress(MpiCommunicator& comm, MpiCommunicator& sync, const std::string& kind,
                                  const std::string& msg) {
  const int n = comm.size();
  EXPECT_NE(msg.find("[mpi] " + kind + " #1 on rank " + std::to_string(comm.rank()) + " gave up, the group failed: "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 0 gave up " + kind + " #1 (data phase hook)"), std::string::npos) << msg;
  for (int round = 0; round < 3; ++round) {
    std::vector<float> v(kCount, static_cast<float>(sync.rank() + round));
    sync.all_reduce(v.data(), kCount, DType::Float32);
    const float want = static_cast<float>(n * (n - 1) / 2 + n * round);
    std::size_t wrong = 0;
    for (float x : v) wrong += x != want;
    EXPECT_EQ(wrong, 0u) << "round " << round;
    sync.barrier();
  }
  EXPECT_THROW(comm.barrier(), std::runtime_error);  // the group stays failed
}

TEST_P(MpiAbandonedCollective, LeavesNoMpiRequestOnTheCallersBuffers) {
  const AbandonCase& param = GetParam();
  // Everything pipelined, in 64 KB pieces (16 per MB), two in flight.
  MpiCommunicator comm(MpiOptions{64 << 10, 2, 0});
  MpiCommunicator sync;
  if (comm.size() < 2) GTEST_SKIP() << "needs two or more processes";
  give_up_on_rank_zero(comm, sync);

  RevocableBuffer send(kCount), recv(kCount);
  std::string msg = "(no exception)";
  try {
    param.run(comm, send.data(), recv.data(), kCount);
  } catch (const std::runtime_error& e) {
    msg = e.what();
  }
  send.revoke();
  recv.revoke();
  if (comm.rank() == 0) sync.barrier();  // #2
  expect_given_up_and_progress(comm, sync, param.kind, msg);
}

INSTANTIATE_TEST_SUITE_P(Mpi, MpiAbandonedCollective, ::testing::ValuesIn(abandon_cases()),
                         [](const ::testing::TestParamInfo<AbandonCase>& info) { return info.param.name; });

// The Tensor forms, whose buffers have owners: MPI may use the caller's memory directly (no
// staging copy), because a collective given up on keeps the owners alive in the graveyard until
// its requests complete. Here the caller drops its last reference as soon as the call threw, and
// the owner's deleter revokes the memory (PROT_NONE, kept reserved so that no later mapping reuses
// it and hides an access). Had the graveyard not kept the owner, the requests left pending would
// touch revoked memory once the peers post their pieces: a segfault, or an EFAULT in a CMA read.
std::shared_ptr<void> revoked_when_released(std::size_t floats) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t bytes = (floats * sizeof(float) + page - 1) / page * page;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("[test] mmap failed");
  auto* data = static_cast<float*>(p);
  for (std::size_t i = 0; i < floats; ++i) data[i] = static_cast<float>(i % 251);
  return std::shared_ptr<void>(p, [bytes](void* q) { mprotect(q, bytes, PROT_NONE); });
}

struct OwnedCase {
  const char* name;
  const char* kind;
  std::function<void(MpiCommunicator& comm, Tensor& send, Tensor& recv)> run;
};

std::vector<OwnedCase> owned_cases() {
  return {
      {"AllReduce", "all_reduce", [](MpiCommunicator& c, Tensor& send, Tensor&) { c.all_reduce(send); }},
      {"BroadcastFromTheLastRank", "broadcast",
       [](MpiCommunicator& c, Tensor& send, Tensor&) { c.broadcast(send, c.size() - 1); }},
      {"AllGather", "all_gather",
       [](MpiCommunicator& c, Tensor& send, Tensor& recv) {
         const std::int64_t per = send.numel() / c.size();
         Tensor block = Tensor::wrap(send.raw(), {per}, send.dtype(), send.storage());
         Tensor all = Tensor::wrap(recv.raw(), {per * c.size()}, recv.dtype(), recv.storage());
         c.all_gather(block, all);
       }},
      {"ReduceScatter", "reduce_scatter",
       [](MpiCommunicator& c, Tensor& send, Tensor& recv) {
         const std::int64_t per = send.numel() / c.size();
         Tensor all = Tensor::wrap(send.raw(), {per * c.size()}, send.dtype(), send.storage());
         Tensor block = Tensor::wrap(recv.raw(), {per}, recv.dtype(), recv.storage());
         c.reduce_scatter(all, block);
       }},
  };
}

class MpiAbandonedOwnedCollective : public ::testing::TestWithParam<OwnedCase> {};

TEST_P(MpiAbandonedOwnedCollective, KeepsTheOwnersOfTheBuffersItLeftRequestsOn) {
  const OwnedCase& param = GetParam();
  MpiCommunicator comm(MpiOptions{64 << 10, 2, 0});
  MpiCommunicator sync;
  if (comm.size() < 2) GTEST_SKIP() << "needs two or more processes";
  give_up_on_rank_zero(comm, sync);

  std::string msg = "(no exception)";
  {
    const auto count = static_cast<std::int64_t>(kCount);
    std::shared_ptr<void> send_owner = revoked_when_released(kCount);
    Tensor send = Tensor::wrap(send_owner.get(), {count}, DType::Float32, send_owner);
    std::shared_ptr<void> recv_owner = revoked_when_released(kCount);
    Tensor recv = Tensor::wrap(recv_owner.get(), {count}, DType::Float32, recv_owner);
    send_owner.reset();  // the tensors hold the only references
    recv_owner.reset();
    try {
      param.run(comm, send, recv);
    } catch (const std::runtime_error& e) {
      msg = e.what();
    }
  }                                      // the caller's last references: released
  if (comm.rank() == 0) sync.barrier();  // #2
  expect_given_up_and_progress(comm, sync, param.kind, msg);
}

INSTANTIATE_TEST_SUITE_P(Mpi, MpiAbandonedOwnedCollective, ::testing::ValuesIn(owned_cases()),
                         [](const ::testing::TestParamInfo<OwnedCase>& info) { return info.param.name; });

}  // namespace
}  // namespace mdtrain::testing
