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
#include <string>
#include <vector>

#include <gtest/gtest.h>

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

TEST_P(MpiAbandonedCollective, LeavesNoMpiRequestOnTheCallersBuffers) {
  const AbandonCase& param = GetParam();
  // Everything pipelined, in 64 KB pieces (16 per MB), two in flight.
  MpiCommunicator comm(MpiOptions{64 << 10, 2, 0});
  MpiCommunicator sync;
  const int n = comm.size();
  if (n < 2) GTEST_SKIP() << "needs two or more processes";
  comm.set_timeout(60);  // a peer that misses the give-up fails the test by timing out, not hanging
  sync.set_timeout(60);
  const bool gives_up = comm.rank() == 0;
  comm.set_data_phase_hook([&](bool issued) {
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

  RevocableBuffer send(kCount), recv(kCount);
  std::string msg = "(no exception)";
  try {
    param.run(comm, send.data(), recv.data(), kCount);
  } catch (const std::runtime_error& e) {
    msg = e.what();
  }
  send.revoke();
  recv.revoke();
  if (gives_up) sync.barrier();  // #2
  const std::string kind = param.kind;
  EXPECT_NE(msg.find("[mpi] " + kind + " #1 on rank " + std::to_string(comm.rank()) + " gave up, the group failed: "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 0 gave up " + kind + " #1 (data phase hook)"), std::string::npos) << msg;

  // MPI progress on every rank, while whatever rank 0 and its peers left pending completes.
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

INSTANTIATE_TEST_SUITE_P(Mpi, MpiAbandonedCollective, ::testing::ValuesIn(abandon_cases()),
                         [](const ::testing::TestParamInfo<AbandonCase>& info) { return info.param.name; });

}  // namespace
}  // namespace mdtrain::testing
