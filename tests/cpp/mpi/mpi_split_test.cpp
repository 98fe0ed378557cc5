// Communicator::split on the MPI backend: the shared suite on groups split from the world (every
// process in reverse order; rank % 2 and rank / 2, the two axes of a 2 x (n/2) mesh), then both
// axes at once, ids, a negative color, and a split that a rank calls wrongly, skips or whose new
// group it aborts. Every process runs the same tests; each checks its own group's results.
#include <chrono>
#include <thread>

#include "distribute/communicator_suite.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/mpi/mpi_communicator.h"
#include "mdtrain/distribute/registry.h"

namespace mdtrain::testing {
namespace {

using RankFn = std::function<int(int)>;

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << part << "\" is not in: " << text;
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

// This process's group of a split of a fresh world communicator (collective: every process).
BackendCase split_case(const std::string& name, RankFn color, RankFn key) {
  const MpiWorldInfo w = mpi_world_info();
  int members = 0;
  for (int r = 0; r < w.size; ++r) members += color(r) == color(w.rank);
  return {name, members,
          [=] {
            auto world = make_mpi_communicator();
            Comms comms;
            comms.push_back(world->split(color(world->rank()), key(world->rank())));
            return comms;
          },
          true, true};
}

std::vector<BackendCase> split_cases() {
  return {
      split_case(
          "mpi_split_reversed", [](int) { return 0; }, [](int r) { return -r; }),
      split_case(
          "mpi_split_mod2", [](int r) { return r % 2; }, [](int r) { return r; }),
      split_case(
          "mpi_split_div2", [](int r) { return r / 2; }, [](int r) { return r; }),
  };
}

std::string case_name(const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(MpiSplit, CommunicatorSuite, ::testing::ValuesIn(split_cases()), case_name);

// The peer tests need every group of two or more ranks (the same tests run on every process):
// the reversed world always, the mesh axes with four processes.
std::vector<BackendCase> split_peer_cases() {
  const int n = mpi_world_info().size;
  auto cases = split_cases();
  if (n < 2) return {};
  if (n != 4) cases.resize(1);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(MpiSplit, CommunicatorPeerSuite, ::testing::ValuesIn(split_peer_cases()), case_name);

// The serial fold, in new-rank order, of every member's input: members are the world ranks of
// one color, ordered by world rank (the key).
std::vector<float> fold_of(unsigned seed, const std::vector<int>& members, std::size_t count, bool mean) {
  std::vector<float> acc(count);
  for (std::size_t i = 0; i < count; ++i) {
    float a = input_value<float>(seed, members[0], i);
    for (std::size_t m = 1; m < members.size(); ++m) a += input_value<float>(seed, members[m], i);
    acc[i] = mean ? a / static_cast<float>(members.size()) : a;
  }
  return acc;
}

std::vector<int> members_of(int n, const RankFn& color, int rank) {
  std::vector<int> m;
  for (int r = 0; r < n; ++r)
    if (color(r) == color(rank)) m.push_back(r);
  return m;
}

// Both axes at once: a row (rank / 2) and a column (rank % 2) all-reduce in turn, pipelined
// (64 KB pieces, nothing fused), each the bitwise serial fold of its members.
TEST(MpiSplit, BothAxesOfAMeshRunInTurnAndMatchTheSerialFold) {
  MpiCommunicator world(MpiOptions{1 << 16, 2, 0});
  const int n = world.size(), r = world.rank();
  const RankFn row_of = [](int q) { return q / 2; }, col_of = [](int q) { return q % 2; };
  auto row = world.split(row_of(r), r);
  auto col = world.split(col_of(r), r);
  const auto rows = members_of(n, row_of, r), cols = members_of(n, col_of, r);
  ASSERT_EQ(row->size(), static_cast<int>(rows.size()));
  ASSERT_EQ(col->size(), static_cast<int>(cols.size()));
  EXPECT_EQ(row->rank(), r % 2);
  EXPECT_EQ(col->rank(), r / 2);
  EXPECT_EQ(static_cast<MpiCommunicator&>(*row).options().chunk_bytes, std::size_t{1} << 16);
  constexpr std::size_t kCount = 100003;
  for (int round = 0; round < 3; ++round) {
    auto a = make_input<float>(10 + round, r, kCount);
    row->all_reduce(a.data(), kCount, DType::Float32, ReduceOp::Sum);
    EXPECT_EQ(compare(a, fold_of(10 + round, rows, kCount, false), true, 1), "") << "row, round " << round;
    auto b = make_input<float>(20 + round, r, kCount);
    col->all_reduce(b.data(), kCount, DType::Float32, ReduceOp::Mean);
    EXPECT_EQ(compare(b, fold_of(20 + round, cols, kCount, true), true, 1), "") << "column, round " << round;
  }
}

// Ids count on every process, a negative color included, so they stay the same everywhere; the
// new group inherits the timeout and outlives its parent.
TEST(MpiSplit, NegativeColorsGetNoGroupAndIdsStayAligned) {
  auto world = std::make_unique<MpiCommunicator>();
  world->set_timeout(42);
  const int n = world->size(), r = world->rank();
  // The last rank joins no group (with one process, that is the only one).
  auto child = world->split(r == n - 1 ? -1 : 7, r);
  MpiCommunicator after;
  EXPECT_EQ(after.id(), world->id() + 2);
  if (r == n - 1) {
    EXPECT_EQ(child, nullptr);
  } else {
    ASSERT_NE(child, nullptr);
    EXPECT_EQ(child->size(), n - 1);
    EXPECT_EQ(child->rank(), r);
    EXPECT_EQ(child->timeout(), 42);
    EXPECT_EQ(static_cast<MpiCommunicator&>(*child).id(), world->id() + 1);
  }
  world.reset();
  if (child) {
    std::int32_t sum = r;
    child->all_reduce(&sum, 1, DType::Int32, ReduceOp::Sum);
    EXPECT_EQ(sum, (n - 1) * (n - 2) / 2);
  }
}

// The last rank calls barrier where the others split: a mismatch on every rank, at once.
TEST(MpiSplit, ARankThatCallsBarrierInsteadOfSplitFailsEveryRankAtOnce) {
  auto comm = make_mpi_communicator();
  const int n = comm->size();
  if (n < 2) GTEST_SKIP() << "needs two or more processes";
  comm->set_timeout(60);  // a missed mismatch fails the test by timing out, not by hanging
  comm->barrier();
  std::string msg;
  bool timed_out = false;
  try {
    if (comm->rank() == n - 1) {
      comm->barrier();
    } else {
      comm->split(0, 0);
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
  EXPECT_TRUE(Contains(msg, "split #2"));
  EXPECT_THROW(comm->split(0, 0), std::runtime_error);  // the group stays failed
}

// The last rank sleeps through the others' split: they time out naming it, and its own split
// then fails at once instead of waiting (or entering MPI_Comm_split alone).
TEST(MpiSplit, ARankThatSleepsThroughASplitIsNamed) {
  auto comm = make_mpi_communicator();
  const int n = comm->size();
  if (n < 2) GTEST_SKIP() << "needs two or more processes";
  const int late = n - 1;
  const std::string who = "rank " + std::to_string(late);
  comm->set_timeout(0.3);
  comm->barrier();
  if (comm->rank() == late) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const std::string msg = message_of([&] { comm->split(0, 0); });
    EXPECT_TRUE(Contains(msg, "[mpi] split #2 on " + who + " cannot run, the group failed earlier: "));
    EXPECT_TRUE(Contains(msg, who + " did not arrive"));
  } else {
    try {
      comm->split(0, 0);
      ADD_FAILURE() << "split without " << who << " did not throw";
    } catch (const TimeoutError& e) {
      EXPECT_TRUE(Contains(e.what(), "[mpi] split #2 on rank " + std::to_string(comm->rank())));
      EXPECT_TRUE(Contains(e.what(), who + " did not arrive (" + who + " last entered barrier #1"));
    }
  }
  // The job goes on with fresh communicators.
  auto fresh = make_mpi_communicator();
  auto half = fresh->split(fresh->rank() % 2, fresh->rank());
  std::int32_t one = 1;
  half->all_reduce(&one, 1, DType::Int32, ReduceOp::Sum);
  EXPECT_EQ(one, (n - fresh->rank() % 2 + 1) / 2);
}

// Rank 0 aborts its new group while its peers there wait in a barrier: they fail with the
// reason, without waiting for the timeout; the parent and the other groups go on.
TEST(MpiSplit, AbortingANewGroupFailsThatGroupOnly) {
  auto world = make_mpi_communicator();
  const int n = world->size(), r = world->rank();
  if (n < 2) GTEST_SKIP() << "needs two or more processes";
  // Rank 0's group: ranks 0 and 1; the others (if any) form a second group.
  auto group = world->split(r < 2 ? 0 : 1, r);
  group->set_timeout(60);  // a lost abort fails the test by timing out, not by hanging
  if (r == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    group->abort("replica 0 failed");
  } else if (r == 1) {
    std::string msg;
    try {
      group->barrier();
      msg = "(no exception)";
    } catch (const TimeoutError& e) {
      msg = std::string("TimeoutError instead of the abort: ") + e.what();
    } catch (const std::runtime_error& e) {
      msg = e.what();
    }
    // Rank 1 may enter the barrier before or after the abort arrives (rank 0 only sleeps 20 ms,
    // and a loaded machine may not schedule rank 1 by then): the wording of "gave up" and "cannot
    // run" differs, the failed collective and the reason must not.
    EXPECT_TRUE(Contains(msg, "[mpi] barrier #1 on rank 1")) << msg;
    EXPECT_TRUE(Contains(msg, "rank 0 aborted the group: replica 0 failed")) << msg;
  } else {
    std::int32_t v = 1;
    group->all_reduce(&v, 1, DType::Int32, ReduceOp::Sum);
    EXPECT_EQ(v, n - 2);
  }
  std::int32_t all = 1;
  world->all_reduce(&all, 1, DType::Int32, ReduceOp::Sum);
  EXPECT_EQ(all, n);
}

}  // namespace
}  // namespace mdtrain::testing
