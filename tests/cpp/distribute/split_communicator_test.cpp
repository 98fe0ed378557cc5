// Communicator::split on the in-process backends: the shared suite on split groups (both axes of
// a 2x2 mesh, reversed keys, hierarchical groups), then what only splits have: both axes of a
// mesh running at once, the order of the new ranks, negative colors, nested splits, a split that
// ranks call wrongly or skip, and aborts that stay inside the group that was aborted.
#include "communicator_suite.h"

#include <atomic>
#include <chrono>
#include <map>

#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/hierarchical_communicator.h"
#include "mdtrain/distribute/single_communicator.h"
#include "mdtrain/distribute/threads/threads_communicator.h"

namespace mdtrain::testing {
namespace {

using RankFn = std::function<int(int)>;

Comms make_hierarchy(int workers, int local) {
  auto cross = ThreadsCommunicator::create_group(workers);
  Comms out;
  for (int w = 0; w < workers; ++w) {
    auto locals = ThreadsCommunicator::create_group(local);
    for (int r = 0; r < local; ++r)
      out.push_back(
          std::make_unique<HierarchicalCommunicator>(std::move(locals[static_cast<std::size_t>(r)]),
                                                     r == 0 ? std::move(cross[static_cast<std::size_t>(w)]) : nullptr,
                                                     workers, w));
  }
  return out;
}

// The group of color `wanted` of a split of a fresh parent group.
BackendCase split_case(std::string name, int ranks, std::function<Comms()> parent, RankFn color, RankFn key, int wanted,
                       bool rank_order = true) {
  return {std::move(name), ranks, [=] { return split_group(parent(), color, key, wanted); }, rank_order, true};
}

std::vector<BackendCase> split_cases() {
  const auto threads4 = [] { return ThreadsCommunicator::create_group(4); };
  const auto mod2 = [](int r) { return r % 2; };
  const auto div2 = [](int r) { return r / 2; };
  const auto by_rank = [](int r) { return r; };
  std::vector<BackendCase> cases;
  // Both axes of a 2x2 mesh (rank = 2 * row + column): the columns, then the rows.
  for (int c : {0, 1}) {
    cases.push_back(split_case("threads4_mod2_color" + std::to_string(c), 2, threads4, mod2, by_rank, c));
    cases.push_back(split_case("threads4_div2_color" + std::to_string(c), 2, threads4, div2, by_rank, c));
  }
  // One group of everyone, in reverse order: new rank = 3 - old rank.
  cases.push_back(split_case(
      "threads4_reversed", 4, threads4, [](int) { return 0; }, [](int r) { return -r; }, 0));
  // Three groups of two out of six, keeping one.
  cases.push_back(split_case(
      "threads6_mod3_color2", 2, [] { return ThreadsCommunicator::create_group(6); }, [](int r) { return r % 3; },
      by_rank, 2));
  // Hierarchical parents: one rank per worker (a flat cross group), inside one worker (a flat
  // local group), and two workers x two ranks (a hierarchical group, sums grouped per worker).
  cases.push_back(split_case(
      "hier2x2_mod2_color1", 2, [] { return make_hierarchy(2, 2); }, mod2, by_rank, 1));
  cases.push_back(split_case(
      "hier2x2_div2_color1", 2, [] { return make_hierarchy(2, 2); }, div2, by_rank, 1));
  cases.push_back(split_case(
      "hier2x4_mod2_color1", 4, [] { return make_hierarchy(2, 4); }, mod2, by_rank, 1,
      /*rank_order=*/false));
  return cases;
}

auto case_name = [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; };

INSTANTIATE_TEST_SUITE_P(Split, CommunicatorSuite, ::testing::ValuesIn(split_cases()), case_name);
// The peer tests name ranks as the group sees them: flat groups only (a hierarchical group names
// its local ranks, see hierarchical_communicator_test.cpp).
std::vector<BackendCase> split_peer_cases() {
  auto cases = split_cases();
  cases.erase(std::remove_if(cases.begin(), cases.end(),
                             [](const BackendCase& c) { return c.name.rfind("hier", 0) == 0; }),
              cases.end());
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Split, CommunicatorPeerSuite, ::testing::ValuesIn(split_peer_cases()), case_name);

// A split of a single rank's group: itself, or nothing.
INSTANTIATE_TEST_SUITE_P(SplitSingle, CommunicatorSuite,
                         ::testing::Values(BackendCase{"single_split", 1,
                                                       [] {
                                                         Comms comms;
                                                         comms.push_back(make_single_communicator()->split(5, 0));
                                                         return comms;
                                                       },
                                                       true, false}),
                         case_name);

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

// Both axes of a 2x2 mesh at once: every rank all-reduces over its row and over its column in
// turn, so the two groups of each axis run concurrently; each result is the serial fold of the
// group's members in new-rank order, bit for bit.
TEST(ThreadsSplit, BothAxesOfAMeshRunAtOnceAndMatchTheSerialFold) {
  for (auto make : std::vector<std::function<Comms()>>{[] { return ThreadsCommunicator::create_group(4); },
                                                       [] { return make_hierarchy(2, 2); }}) {
    Comms world = make();
    constexpr std::size_t kCount = 10007;
    std::vector<std::vector<float>> rows(4), cols(4);
    std::vector<int> row_rank(4), col_rank(4);
    run_on_ranks(world, [&](Communicator& comm, std::size_t local) {
      const int r = comm.rank();
      auto row = comm.split(r / 2, r);  // ranks {0, 1} and {2, 3}
      auto col = comm.split(r % 2, r);  // ranks {0, 2} and {1, 3}
      row_rank[local] = row->rank();
      col_rank[local] = col->rank();
      for (int round = 0; round < 3; ++round) {
        rows[local] = make_input<float>(10 + round, r, kCount);
        row->all_reduce(rows[local].data(), kCount, DType::Float32, ReduceOp::Sum);
        cols[local] = make_input<float>(20 + round, r, kCount);
        col->all_reduce(cols[local].data(), kCount, DType::Float32, ReduceOp::Mean);
      }
    });
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(row_rank[static_cast<std::size_t>(r)], r % 2);
      EXPECT_EQ(col_rank[static_cast<std::size_t>(r)], r / 2);
      const int row0 = r / 2 * 2, col0 = r % 2;
      std::vector<float> row_want(kCount), col_want(kCount);
      for (std::size_t i = 0; i < kCount; ++i) {
        row_want[i] = input_value<float>(12, row0, i) + input_value<float>(12, row0 + 1, i);
        col_want[i] = (input_value<float>(22, col0, i) + input_value<float>(22, col0 + 2, i)) / 2.0f;
      }
      EXPECT_EQ(compare(rows[static_cast<std::size_t>(r)], row_want, true, 2), "") << "row of rank " << r;
      EXPECT_EQ(compare(cols[static_cast<std::size_t>(r)], col_want, true, 2), "") << "column of rank " << r;
    }
  }
}

// Ranks are ordered by (key, old rank); a negative color joins no group; the new groups inherit
// the timeout; the backend stays the parent's.
TEST(ThreadsSplit, NewRanksFollowKeyThenOldRankAndNegativeColorsGetNoGroup) {
  Comms world = ThreadsCommunicator::create_group(5);
  for (auto& c : world) c->set_timeout(7.5);
  // Ranks 0..3 with keys 1, 0, 1, 0 form one group; rank 4 joins none.
  Comms children = split_on_threads(
      world, [](int r) { return r == 4 ? -1 : 3; }, [](int r) { return r % 2 == 0 ? 1 : 0; });
  ASSERT_EQ(children[4], nullptr);
  const int want[4] = {2, 0, 3, 1};
  for (int r = 0; r < 4; ++r) {
    ASSERT_NE(children[static_cast<std::size_t>(r)], nullptr) << "rank " << r;
    EXPECT_EQ(children[static_cast<std::size_t>(r)]->rank(), want[r]) << "rank " << r;
    EXPECT_EQ(children[static_cast<std::size_t>(r)]->size(), 4);
    EXPECT_EQ(children[static_cast<std::size_t>(r)]->timeout(), 7.5);
    EXPECT_EQ(children[static_cast<std::size_t>(r)]->backend(), "threads");
  }
  // The new group works without its parent, whose ranks are gone.
  world.clear();
  children.pop_back();
  std::vector<std::vector<std::int32_t>> got(4);
  run_on_ranks(children, [&](Communicator& comm, std::size_t local) {
    got[local].assign(4, 0);
    const std::int32_t mine = static_cast<std::int32_t>(local);  // the old rank
    comm.all_gather(&mine, got[local].data(), 1, DType::Int32);
  });
  for (auto& g : got) EXPECT_EQ(g, (std::vector<std::int32_t>{1, 3, 0, 2}));
}

// A split of a split: 8 ranks -> two groups of 4 -> four groups of 2.
TEST(ThreadsSplit, SplitsOfSplitGroupsNest) {
  Comms world = ThreadsCommunicator::create_group(8);
  std::vector<std::int64_t> sums(8);
  std::vector<int> sizes(8);
  run_on_ranks(world, [&](Communicator& comm, std::size_t local) {
    const int r = comm.rank();
    auto half = comm.split(r / 4, r);
    auto pair = half->split(half->rank() / 2, half->rank());
    std::int64_t v = r;
    pair->all_reduce(&v, 1, DType::Int64, ReduceOp::Sum);
    sums[local] = v;
    sizes[local] = pair->size();
  });
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(sizes[static_cast<std::size_t>(r)], 2);
    EXPECT_EQ(sums[static_cast<std::size_t>(r)], 2 * (r / 2 * 2) + 1) << "rank " << r;
  }
}

// A rank calling another collective where the others split: a mismatch on every rank, no hang.
TEST(ThreadsSplit, ARankThatDoesNotCallSplitIsAMismatchOnEveryRank) {
  for (auto make : std::vector<std::function<Comms()>>{[] { return ThreadsCommunicator::create_group(3); },
                                                       [] { return make_hierarchy(3, 1); }}) {
    Comms world = make();
    std::vector<std::string> errors(world.size());
    run_on_ranks(world, [&](Communicator& comm, std::size_t local) {
      comm.set_timeout(60);  // a missed mismatch fails by timing out, not by hanging
      errors[local] = message_of([&] {
        if (comm.rank() == 2) {
          comm.barrier();
        } else {
          comm.split(0, comm.rank());
        }
      });
    });
    for (std::size_t local = 0; local < world.size(); ++local) {
      const std::string& e = errors[local];
      EXPECT_NE(e.find("collective mismatch"), std::string::npos) << e;
      EXPECT_NE(e.find("barrier #1"), std::string::npos) << e;
      EXPECT_EQ(e.find("timed out"), std::string::npos) << e;
    }
    // The threads backend names the split itself.
    if (world[0]->backend() == "threads") EXPECT_NE(errors[0].find("split #1"), std::string::npos) << errors[0];
  }
}

// A rank that never calls split: the others time out naming the split and the missing rank.
TEST(ThreadsSplit, ASkippedSplitTimesOutNamingTheMissingRank) {
  Comms world = ThreadsCommunicator::create_group(3);
  std::vector<std::string> errors(3);
  std::vector<int> timeouts(3, 0);
  run_on_ranks(world, [&](Communicator& comm, std::size_t local) {
    comm.set_timeout(0.2);
    if (comm.rank() == 2) return;
    try {
      comm.split(0, 0);
    } catch (const TimeoutError& e) {
      timeouts[local] = 1;
      errors[local] = e.what();
    }
  });
  for (std::size_t local : {0u, 1u}) {
    EXPECT_EQ(timeouts[local], 1);
    EXPECT_EQ(errors[local].rfind("[threads] split #1 on rank " + std::to_string(local), 0), 0u) << errors[local];
    EXPECT_NE(errors[local].find("rank 2 did not arrive (rank 2 has entered no collective)"), std::string::npos)
        << errors[local];
  }
  EXPECT_THROW(world[2]->split(0, 0), TimeoutError);  // at once: the group failed
}

// Aborting one new group releases its own ranks only: its sibling group and the parent go on.
TEST(ThreadsSplit, AbortingANewGroupFailsThatGroupOnly) {
  Comms world = ThreadsCommunicator::create_group(4);
  Comms pairs = split_on_threads(
      world, [](int r) { return r / 2; }, [](int r) { return r; });
  std::vector<std::string> errors(4);
  std::vector<float> sibling(4, 0.0f), parent(4, 0.0f);
  run_on_ranks(world, [&](Communicator& comm, std::size_t local) {
    Communicator& pair = *pairs[local];
    pair.set_timeout(60);  // a lost abort fails by timing out, not by hanging
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      pair.abort("replica 0 failed");
    } else if (comm.rank() == 1) {
      errors[local] = message_of([&] { pair.barrier(); });
    } else {
      float v = static_cast<float>(comm.rank());
      pair.all_reduce(&v, 1, DType::Float32, ReduceOp::Sum);
      sibling[local] = v;
    }
    float w = 1.0f;
    comm.all_reduce(&w, 1, DType::Float32, ReduceOp::Sum);
    parent[local] = w;
  });
  EXPECT_NE(errors[1].find("[threads] barrier #1 on rank 1 gave up, the group failed: rank 0 aborted the group: "
                           "replica 0 failed"),
            std::string::npos)
      << errors[1];
  EXPECT_EQ(sibling[2], 5.0f);
  EXPECT_EQ(sibling[3], 5.0f);
  for (float v : parent) EXPECT_EQ(v, 4.0f);
  // The aborted group stays failed; the sibling does not.
  EXPECT_THROW(pairs[0]->barrier(), std::runtime_error);
}

// Hierarchical groups: a split that no hierarchy can hold is the same std::invalid_argument on
// every rank, and the parent stays usable.
TEST(HierarchicalSplit, AGroupSpreadUnevenlyOverWorkersIsRejectedOnEveryRank) {
  Comms world = make_hierarchy(2, 2);
  std::vector<std::string> errors(4);
  std::vector<float> after(4, 0.0f);
  run_on_ranks(world, [&](Communicator& comm, std::size_t local) {
    try {
      comm.split(comm.rank() == 3 ? 1 : 0, comm.rank());  // {0, 1, 2}: 2 ranks in worker 0, 1 in worker 1
    } catch (const std::invalid_argument& e) {
      errors[local] = e.what();
    }
    float v = 1.0f;
    comm.all_reduce(&v, 1, DType::Float32, ReduceOp::Sum);
    after[local] = v;
  });
  for (std::size_t local = 0; local < 4; ++local) {
    EXPECT_EQ(errors[local].rfind("[hierarchical] split: the ranks of color 0 are spread unevenly", 0), 0u)
        << errors[local];
    EXPECT_EQ(after[local], 4.0f);
  }
}

// What a split of a hierarchical group becomes.
TEST(HierarchicalSplit, NewGroupsAreFlatWhenOneLevelSuffices) {
  Comms world = make_hierarchy(2, 4);
  std::vector<std::string> inside(8), across(8), both(8);
  run_on_ranks(world, [&](Communicator& comm, std::size_t local) {
    const int r = comm.rank();
    inside[local] = comm.split(r / 4, r)->backend();  // one worker's ranks
    across[local] = comm.split(r % 4, r)->backend();  // one rank per worker
    both[local] = comm.split(r % 2, r)->backend();    // two per worker
  });
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(inside[static_cast<std::size_t>(r)], "threads");
    EXPECT_EQ(across[static_cast<std::size_t>(r)], "threads");
    EXPECT_EQ(both[static_cast<std::size_t>(r)], "hierarchical");
  }
}

TEST(SingleSplit, NegativeColorGivesNoGroupAndAbortedGroupsDoNotSplit) {
  auto comm = make_single_communicator();
  comm->set_timeout(3);
  EXPECT_EQ(comm->split(-1, 0), nullptr);
  auto child = comm->split(0, 0);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->timeout(), 3);
  comm->abort("stop");
  EXPECT_THROW(comm->split(0, 0), std::runtime_error);
  child->barrier();  // the new group does not share the parent's failure
}

}  // namespace
}  // namespace mdtrain::testing
