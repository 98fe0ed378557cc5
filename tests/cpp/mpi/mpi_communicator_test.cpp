// The shared communicator suite on the MPI backend (one rank per process: each process checks its
// own rank against the serial reference), twice: with the defaults and with every payload
// pipelined in 4 KB pieces. Then what only MPI has: world info, communicator ids, barriers seen
// through the file system, 64 MB buffers, and the diagnosis of a rank that sleeps, waits on
// another communicator, calls the wrong collective or aborts.
#include "mdtrain/distribute/mpi/mpi_communicator.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "distribute/communicator_suite.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/registry.h"

namespace mdtrain::testing {
namespace {

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << part << "\" is not in: " << text;
}

std::vector<BackendCase> mpi_cases() {
  const int n = mpi_world_info().size;
  const std::string name = "mpi_" + std::to_string(n);
  return {
      {name, n, [] { return create_communicators("mpi"); }, true, true},
      // Nothing fused, pieces of 4 KB: every payload goes through the pipeline, in many uneven
      // chunks, with empty slices where a chunk has fewer elements than there are ranks.
      {name + "_pipelined_in_4KB_pieces", n,
       [] {
         Comms comms;
         comms.push_back(std::make_unique<MpiCommunicator>(MpiOptions{4096, 3, 0}));
         return comms;
       },
       true, true},
  };
}

std::string case_name(const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Mpi, CommunicatorSuite, ::testing::ValuesIn(mpi_cases()), case_name);

std::vector<BackendCase> mpi_peer_cases() {
  return mpi_world_info().size >= 2 ? mpi_cases() : std::vector<BackendCase>{};
}

INSTANTIATE_TEST_SUITE_P(Mpi, CommunicatorPeerSuite, ::testing::ValuesIn(mpi_peer_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CommunicatorPeerSuite);

INSTANTIATE_TEST_SUITE_P(Mpi, PointToPointSuite, ::testing::ValuesIn(mpi_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Mpi, PointToPointPeerSuite, ::testing::ValuesIn(mpi_peer_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PointToPointPeerSuite);

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(MpiWorld, InfoMatchesTheCommunicatorAndCountsEveryProcessOnce) {
  const MpiWorldInfo w = mpi_world_info();
  auto comm = make_mpi_communicator();
  EXPECT_EQ(comm->backend(), "mpi");
  EXPECT_EQ(comm->rank(), w.rank);
  EXPECT_EQ(comm->size(), w.size);
  ASSERT_GE(w.local_rank, 0);
  ASSERT_LT(w.local_rank, w.local_size);
  ASSERT_LE(w.local_size, w.size);
  // Local rank 0 of each host reports its host's process count: together they are the job.
  std::int64_t hosts[2] = {w.local_rank == 0 ? w.local_size : 0, w.local_rank == 0 ? 1 : 0};
  comm->all_reduce(hosts, 2, DType::Int64, ReduceOp::Sum);
  EXPECT_EQ(hosts[0], w.size);
  EXPECT_GE(hosts[1], 1);
  EXPECT_TRUE(mpi_available());
  EXPECT_TRUE(is_backend_available("mpi"));
}

TEST(MpiCommunicator, IdsCountUpInCreationOrderTheSameOnEveryRank) {
  MpiCommunicator a;
  MpiCommunicator b(MpiOptions{1 << 16, 2});
  EXPECT_EQ(b.id(), a.id() + 1);
  EXPECT_EQ(b.options().chunk_bytes, 1u << 16);
  EXPECT_EQ(b.options().chunks_in_flight, 2);
  const std::int32_t mine[2] = {a.id(), b.id()};
  std::vector<std::int32_t> all(2 * static_cast<std::size_t>(a.size()));
  a.all_gather(mine, all.data(), 2, DType::Int32);
  for (int r = 0; r < a.size(); ++r) {
    EXPECT_EQ(all[2 * r], a.id()) << "rank " << r;
    EXPECT_EQ(all[2 * r + 1], b.id()) << "rank " << r;
  }
}

TEST(MpiCommunicator, BadOptionsAreRejectedBeforeAnyCollective) {
  // Checked before the collective MPI_Comm_idup, so one rank alone may try them.
  EXPECT_TRUE(Contains(message_of([] {
                         MpiCommunicator c(MpiOptions{32, 1});
                       }),
                       "[mpi] MpiOptions: chunk_bytes must be in [64, 2^30] (got 32)"));
  EXPECT_TRUE(Contains(message_of([] {
                         MpiCommunicator c(MpiOptions{4096, 0});
                       }),
                       "[mpi] MpiOptions: chunks_in_flight must be >= 1 (got 0)"));
  EXPECT_THROW(MpiCommunicator(MpiOptions{4096, 0}), std::invalid_argument);
}

std::uint64_t fnv1a(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ULL;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

// The shared suite's barrier test checks plain writes to memory the ranks share; processes share
// the file system instead (on one host). The late ranks arrive later each round, so a barrier
// that does not wait lets an early rank look before a late rank wrote.
TEST(MpiBarrier, FilesWrittenBeforeABarrierAreSeenByEveryRankAfterIt) {
  const MpiWorldInfo w = mpi_world_info();
  if (w.local_size != w.size) GTEST_SKIP() << "the ranks are on several hosts";
  namespace fs = std::filesystem;
  auto comm = make_mpi_communicator();
  std::vector<std::uint8_t> dir(512, 0);
  if (comm->rank() == 0) {
    std::string pattern = (fs::temp_directory_path() / "mdtrain_mpi_barrier_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    std::copy(pattern.begin(), pattern.end(), dir.begin());
  }
  comm->broadcast(dir.data(), dir.size(), DType::UInt8, 0);
  const fs::path root(reinterpret_cast<const char*>(dir.data()));
  int missing = 0;
  for (int round = 0; round < 20; ++round) {
    if (round % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20 * comm->rank()));
    const auto name = [&](int r) { return root / (std::to_string(round) + "_" + std::to_string(r)); };
    std::ofstream(name(comm->rank())) << round;
    comm->barrier();
    for (int r = 0; r < comm->size(); ++r) missing += fs::exists(name(r)) ? 0 : 1;
  }
  EXPECT_EQ(missing, 0);
  comm->barrier();  // everyone looked: the directory may go
  if (comm->rank() == 0) fs::remove_all(root);
}

// 64 MB + 3 floats: 33 pipeline chunks of 2 MB, the last one uneven, slices uneven for 3 ranks.
TEST(MpiLarge, AllReduceOf64MBIsBitwiseTheSerialReferenceOnEveryRank) {
  constexpr std::size_t kCount = (64u << 20) / sizeof(float) + 3;
  auto comm = make_mpi_communicator();
  const int n = comm->size();
  auto data = make_input<float>(77, comm->rank(), kCount);
  comm->all_reduce(data.data(), kCount, DType::Float32, ReduceOp::Sum);
  {
    const auto want = reference_reduce<float>(77, n, 0, kCount, ReduceOp::Sum);
    EXPECT_EQ(compare(data, want, true, n), "") << "rank " << comm->rank();
  }
  // The same bits everywhere, whatever the reference says.
  const std::uint64_t mine = fnv1a(data.data(), kCount * sizeof(float));
  std::vector<std::uint64_t> all(static_cast<std::size_t>(n));
  comm->all_gather(&mine, all.data(), 1, DType::Int64);
  for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << " differs from rank 0";

  // reduce: the root gets exactly the all-reduce's bits, the others keep their input.
  const int root = n - 1;
  auto reduced = make_input<float>(77, comm->rank(), kCount);
  comm->reduce(reduced.data(), kCount, DType::Float32, ReduceOp::Sum, root);
  if (comm->rank() == root) {
    EXPECT_EQ(compare(reduced, data, true, 1), "");
  } else {
    EXPECT_EQ(compare(reduced, make_input<float>(77, comm->rank(), kCount), true, 1), "");
  }
}

TEST(MpiLarge, BroadcastAndAllGatherOf64MB) {
  constexpr std::size_t kCount = (64u << 20) / sizeof(float) + 5;
  auto comm = make_mpi_communicator();
  const int n = comm->size();
  auto data = make_input<float>(5, comm->rank(), kCount);
  comm->broadcast(data.data(), kCount, DType::Float32, n - 1);
  EXPECT_EQ(compare(data, make_input<float>(5, n - 1, kCount), true, 1), "");

  const std::size_t per_rank = kCount / static_cast<std::size_t>(n);
  std::vector<float> gathered(per_rank * static_cast<std::size_t>(n));
  const auto send = make_input<float>(6, comm->rank(), per_rank);
  comm->all_gather(send.data(), gathered.data(), per_rank, DType::Float32);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> got(gathered.begin() + static_cast<std::ptrdiff_t>(r * per_rank),
                                 gathered.begin() + static_cast<std::ptrdiff_t>((r + 1) * per_rank));
    EXPECT_EQ(compare(got, make_input<float>(6, r, per_rank), true, 1), "") << "block " << r;
  }
}

// Every rank enters barrier #1; the last rank then sleeps through the others' all_reduce #2,
// which must time out naming it and what it last did, and its own next collective must fail
// with the others' diagnosis instead of waiting.
TEST(MpiTimeout, ARankThatSleepsThroughACollectiveIsNamedWithWhatItLastEntered) {
  auto comm = make_mpi_communicator();
  const int n = comm->size();
  if (n < 2) GTEST_SKIP() << "needs two or more processes";
  const int late = n - 1;
  const std::string who = "rank " + std::to_string(late);
  comm->set_timeout(0.5);
  comm->barrier();
  if (comm->rank() == late) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    try {
      comm->barrier();
      ADD_FAILURE() << "barrier after the others timed out did not throw";
    } catch (const TimeoutError& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(Contains(msg, "[mpi] barrier #2 on " + who +
                                    " cannot run, the group failed "
                                    "earlier: all_reduce #2 on rank "));
      EXPECT_TRUE(Contains(msg, who + " did not arrive"));
    }
  } else {
    float v = 1.0f;
    try {
      comm->all_reduce(&v, 1, DType::Float32);
      ADD_FAILURE() << "all_reduce without " << who << " did not throw";
    } catch (const TimeoutError& e) {
      // This rank's own timeout, or (3 ranks) the other waiting rank's, which came first.
      const std::string msg = e.what();
      EXPECT_TRUE(Contains(msg, "[mpi] all_reduce #2 on rank " + std::to_string(comm->rank())));
      EXPECT_TRUE(Contains(msg, "timed out after 0.5 s: " + who + " did not arrive (" + who +
                                    " last entered barrier #1 and did not answer within "));
    }
    EXPECT_THROW(comm->barrier(), TimeoutError);  // at once: the group failed
  }
  // A fresh communicator works: what the training engine does after a failure.
  auto fresh = make_mpi_communicator();
  std::int32_t sum = comm->rank();
  fresh->all_reduce(&sum, 1, DType::Int32, ReduceOp::Sum);
  EXPECT_EQ(sum, n * (n - 1) / 2);
}

// The last rank waits in a barrier of another communicator instead of joining all_reduce #2:
// the report says where it is. Then rank 0 aborts that other communicator to release it.
TEST(MpiTimeout, ARankWaitingOnAnotherCommunicatorIsReportedWhereItWaits) {
  auto a = std::make_unique<MpiCommunicator>();
  auto b = std::make_unique<MpiCommunicator>();
  const int n = a->size();
  if (n < 2) GTEST_SKIP() << "needs two or more processes";
  const int late = n - 1;
  const std::string who = "rank " + std::to_string(late);
  a->set_timeout(0.5);
  b->set_timeout(60);  // a broken abort fails the test by timing out instead of hanging it
  a->barrier();
  if (a->rank() == late) {
    try {
      b->barrier();
      ADD_FAILURE() << "barrier of the other communicator was not aborted";
    } catch (const TimeoutError& e) {
      ADD_FAILURE() << "TimeoutError instead of the abort: " << e.what();
    } catch (const std::runtime_error& e) {
      EXPECT_TRUE(Contains(std::string(e.what()), "[mpi] barrier #1 on " + who +
                                                      " gave up, the group failed: rank 0 "
                                                      "aborted the group: the test is over"));
    }
    return;
  }
  float v = 1.0f;
  const std::string msg = message_of([&] { a->all_reduce(&v, 1, DType::Float32); });
  EXPECT_TRUE(Contains(msg, who + " did not arrive (" + who + " last entered barrier #1 and is " +
                                "inside no collective of MPI communicator " + std::to_string(a->id()) +
                                "; it waits in barrier #1 of MPI communicator " + std::to_string(b->id()) + ")"));
  if (a->rank() == 0) b->abort("the test is over");
}

// Calling barrier where the others call all_reduce is a mismatch every rank reports at once.
TEST(MpiMismatch, ARankThatCallsBarrierInsteadOfAllReduceFailsEveryRankAtOnce) {
  auto comm = make_mpi_communicator();
  const int n = comm->size();
  if (n < 2) GTEST_SKIP() << "needs two or more processes";
  const int late = n - 1;
  comm->set_timeout(60);  // a missed mismatch fails the test by timing out, not by hanging
  comm->barrier();
  float v = 1.0f;
  std::string msg;
  bool timed_out = false;
  try {
    if (comm->rank() == late) {
      comm->barrier();
    } else {
      comm->all_reduce(&v, 1, DType::Float32);
    }
    msg = "(no exception)";
  } catch (const TimeoutError& e) {
    timed_out = true;
    msg = e.what();
  } catch (const std::runtime_error& e) {
    msg = e.what();
  }
  EXPECT_FALSE(timed_out) << msg;
  EXPECT_TRUE(Contains(msg, "[mpi] collective mismatch: rank "));
  EXPECT_TRUE(Contains(msg, "barrier #2"));
  EXPECT_TRUE(Contains(msg, "all_reduce #2(count 1, float32, sum)"));
  EXPECT_THROW(comm->barrier(), std::runtime_error);
}

// An abort reaches peers that enter a collective later, too.
TEST(MpiAbort, PeersThatArriveLaterFailWithTheReason) {
  auto comm = make_mpi_communicator();
  auto sync = make_mpi_communicator();
  if (comm->size() < 2) GTEST_SKIP() << "needs two or more processes";
  comm->set_timeout(60);
  if (comm->rank() == 0) comm->abort("bad batch");
  sync->barrier();
  const std::string msg = message_of([&] { comm->barrier(); });
  EXPECT_TRUE(Contains(msg, "[mpi] barrier #1 on rank " + std::to_string(comm->rank())));
  EXPECT_TRUE(Contains(msg, "rank 0 aborted the group: bad batch"));
  EXPECT_TRUE(Contains(message_of([&] {
                         comm->abort("again");
                         comm->barrier();
                       }),
                       "rank 0 aborted the group: bad batch"));
}

// Another thread of rank 0 aborts while rank 0's main thread is in a 64 MB all_reduce: waiting
// for late peers (the others start 300 ms later) or already moving data (all start together).
// Either way every rank ends with the abort's reason, none waits for its timeout.
class MpiAbortFromAnotherThread : public ::testing::TestWithParam<int> {};

TEST_P(MpiAbortFromAnotherThread, EveryRankFailsWithTheReasonAndNoneTimesOut) {
  const int peer_delay_ms = GetParam();
  constexpr std::size_t kCount = (64u << 20) / sizeof(float);
  auto comm = make_mpi_communicator();
  if (comm->size() < 2) GTEST_SKIP() << "needs two or more processes";
  comm->set_timeout(60);  // a lost abort fails the test by timing out, not by hanging it
  comm->barrier();
  std::vector<float> data(kCount, 1.0f);
  std::thread aborter;
  if (comm->rank() == 0) {
    aborter = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      comm->abort("stop");
    });
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(peer_delay_ms));
  }
  std::string msg;
  bool timed_out = false;
  try {
    comm->all_reduce(data.data(), kCount, DType::Float32);
    msg = "(no exception)";
  } catch (const TimeoutError& e) {
    timed_out = true;
    msg = e.what();
  } catch (const std::runtime_error& e) {
    msg = e.what();
  }
  if (aborter.joinable()) aborter.join();
  if (msg == "(no exception)") {
    // On a fast, idle machine the transfer can finish before the abort lands: then the next
    // collective must carry it, still without waiting for the timeout.
    try {
      comm->all_reduce(data.data(), 1, DType::Float32);
      msg = "(no exception from the next collective either)";
    } catch (const TimeoutError& e) {
      timed_out = true;
      msg = e.what();
    } catch (const std::runtime_error& e) {
      msg = e.what();
    }
  }
  EXPECT_FALSE(timed_out) << msg;
  EXPECT_TRUE(Contains(msg, "[mpi] all_reduce #")) << msg;
  EXPECT_TRUE(Contains(msg, " on rank " + std::to_string(comm->rank()))) << msg;
  EXPECT_TRUE(Contains(msg, "rank 0 aborted the group: stop")) << msg;
}

INSTANTIATE_TEST_SUITE_P(Mpi, MpiAbortFromAnotherThread, ::testing::Values(300, 0),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param ? "WhilePeersAreLate" : "WhileDataMoves";
                         });

}  // namespace
}  // namespace mdtrain::testing
