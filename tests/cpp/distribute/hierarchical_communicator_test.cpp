// The shared suite on HierarchicalCommunicator, with threads groups standing in for both levels
// (W workers x L local ranks in one process), so every grouping of the reduction is checked
// against the serial reference without MPI.
#include "communicator_suite.h"

#include "mdtrain/core/errors.h"

#include "mdtrain/distribute/hierarchical_communicator.h"
#include "mdtrain/distribute/threads/threads_communicator.h"

namespace mdtrain::testing {
namespace {

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

std::vector<BackendCase> hierarchical_cases() {
  std::vector<BackendCase> cases;
  for (auto [w, l] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {3, 1}, {1, 3}, {2, 2}, {3, 2}, {2, 3}}) {
    // One rank per worker: the sums are the cross group's, in rank order. Otherwise they are
    // grouped per worker, so compared with a tolerance.
    cases.push_back({"w" + std::to_string(w) + "_l" + std::to_string(l), w * l, [w, l] { return make_hierarchy(w, l); },
                     l == 1 || w == 1, true});
  }
  return cases;
}

auto case_name = [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; };

INSTANTIATE_TEST_SUITE_P(Hierarchical, CommunicatorSuite, ::testing::ValuesIn(hierarchical_cases()), case_name);

// A failure in one worker must reach every rank of every worker, whichever level it starts at.
TEST(HierarchicalCommunicator, AbortInOneWorkerReleasesEveryOtherWorker) {
  for (int aborting : {0, 3, 5}) {  // a leader, a non-leader of another worker, the last rank
    auto comms = make_hierarchy(3, 2);
    for (auto& c : comms) c->set_timeout(30);
    std::vector<std::string> errors(comms.size());
    std::vector<std::thread> threads;
    for (std::size_t g = 0; g < comms.size(); ++g) {
      threads.emplace_back([&, g] {
        float x = 1.0f;
        try {
          if (static_cast<int>(g) == aborting) {
            comms[g]->abort("replica failed");
          } else {
            comms[g]->all_reduce(&x, 1, DType::Float32, ReduceOp::Sum);
          }
        } catch (const std::exception& e) {
          errors[g] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (std::size_t g = 0; g < comms.size(); ++g) {
      if (static_cast<int>(g) == aborting) continue;
      EXPECT_NE(errors[g].find("replica failed"), std::string::npos) << "rank " << g << ": " << errors[g];
    }
  }
}

TEST(HierarchicalCommunicator, SkippedCollectiveTimesOutOnEveryWorker) {
  auto comms = make_hierarchy(2, 2);
  for (auto& c : comms) c->set_timeout(0.5);
  std::vector<std::string> errors(comms.size());
  std::vector<char> timed_out(comms.size(), 0);  // not vector<bool>: threads write neighbours
  std::vector<std::thread> threads;
  for (std::size_t g = 0; g < comms.size(); ++g) {
    threads.emplace_back([&, g] {
      if (g == 3) return;  // worker 1's second rank never arrives
      float x = 1.0f;
      try {
        comms[g]->all_reduce(&x, 1, DType::Float32, ReduceOp::Sum);
      } catch (const TimeoutError& e) {
        timed_out[g] = 1;
        errors[g] = e.what();
      } catch (const std::exception& e) {
        errors[g] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  // Worker 1's leader sees its local rank 1 missing; everyone else hears of it instead of waiting.
  EXPECT_TRUE(timed_out[2]) << errors[2];
  EXPECT_NE(errors[2].find("rank 1 did not arrive"), std::string::npos) << errors[2];
  EXPECT_NE(errors[2].find("worker 1"), std::string::npos) << errors[2];
  for (std::size_t g : {0u, 1u}) EXPECT_FALSE(errors[g].empty()) << "rank " << g << " kept waiting";
}

TEST(HierarchicalCommunicator, GlobalRanksAreWorkerMajor) {
  auto comms = make_hierarchy(3, 2);
  ASSERT_EQ(comms.size(), 6u);
  for (int g = 0; g < 6; ++g) {
    EXPECT_EQ(comms[static_cast<std::size_t>(g)]->rank(), g);
    EXPECT_EQ(comms[static_cast<std::size_t>(g)]->size(), 6);
  }
}

TEST(HierarchicalCommunicator, LeaderNeedsCrossAndOthersMustNotHaveIt) {
  auto locals = ThreadsCommunicator::create_group(2);
  EXPECT_THROW(HierarchicalCommunicator(std::move(locals[0]), nullptr, 2, 0), std::invalid_argument);
  auto cross = ThreadsCommunicator::create_group(2);
  EXPECT_THROW(HierarchicalCommunicator(std::move(locals[1]), std::move(cross[0]), 2, 0), std::invalid_argument);
  auto locals2 = ThreadsCommunicator::create_group(1);
  auto cross2 = ThreadsCommunicator::create_group(2);
  // Worker index must match the cross rank.
  EXPECT_THROW(HierarchicalCommunicator(std::move(locals2[0]), std::move(cross2[1]), 2, 0), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain::testing
