// main() of the MPI tests, run by mpiexec with several processes (tests/cpp/CMakeLists.txt).
//
// Every process runs the same tests in the same order. Rank 0 prints gtest's usual output; the
// other ranks print only their failures, each line prefixed with "[rank r]", so the log reads
// like one run. After each test the ranks share whether it failed (on a communicator of their
// own), rank 0 names the ranks where it did, and the exit status is non-zero on every rank when
// any rank failed a test: mpiexec, and so CTest, report the failure.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mdtrain/distribute/optional_backends.h"

namespace {

std::unique_ptr<mdtrain::Communicator> g_results;  // gathers per-test outcomes
int g_rank = 0;
std::vector<std::string> g_failed_elsewhere;

// One write per message keeps lines of different ranks from interleaving mid-line.
void print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

std::string prefixed(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) out += "[rank " + std::to_string(g_rank) + "] " + line + "\n";
  return out;
}

std::string test_name(const ::testing::TestInfo& info) {
  return std::string(info.test_suite_name()) + "." + info.name();
}

// Ranks other than 0: failures only.
class FailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::ostringstream os;
    os << (result.file_name() ? result.file_name() : "unknown file") << ":" << result.line_number() << ": Failure\n"
       << result.message() << "\n";
    print(prefixed(os.str()));
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) print(prefixed("[  FAILED  ] " + test_name(info)));
  }
};

// Every rank: after each test, rank 0 learns on which ranks it failed.
class ResultGatherer : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const int n = g_results->size();
    std::int32_t mine = info.result()->Failed() ? 1 : 0;
    std::vector<std::int32_t> all(static_cast<std::size_t>(n));
    g_results->all_gather(&mine, all.data(), 1, mdtrain::DType::Int32);
    if (g_rank != 0) return;
    std::string ranks;
    for (int r = 1; r < n; ++r) {
      if (all[static_cast<std::size_t>(r)]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    }
    if (ranks.empty()) return;
    g_failed_elsewhere.push_back(test_name(info) + " (rank " + ranks + ")");
    print("[  FAILED  ] " + test_name(info) + " on rank " + ranks + "\n");
  }
};

}  // namespace

int main(int argc, char** argv) {
  // MPI first: the parameterized cases are made during InitGoogleTest and need the world size.
  const mdtrain::MpiWorldInfo world = mdtrain::mpi_world_info();
  g_rank = world.rank;
  ::testing::InitGoogleTest(&argc, argv);
  // Two tests of the shared suite assume ranks in one process: its skipped-collective test has
  // the late rank call barrier() at once, which between processes meets the others' all_reduce
  // as a mismatch (the threads backend's join keeps them apart), and its barrier test checks
  // plain writes to shared memory. mpi_communicator_test.cpp has MPI versions of both.
  std::string filter = GTEST_FLAG_GET(filter);
  filter += filter.find('-') == std::string::npos ? "-" : ":";
  filter +=
      "*CommunicatorPeerSuite.SkippedCollectiveTimesOutNamingTheMissingRank*:"
      "*CommunicatorSuite.BarrierOrdersWritesBeforeReads*";
  GTEST_FLAG_SET(filter, filter);

  g_results = mdtrain::make_mpi_communicator();
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (g_rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter);
  }
  listeners.Append(new ResultGatherer);

  std::int32_t failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  g_results->all_reduce(&failed, 1, mdtrain::DType::Int32, mdtrain::ReduceOp::Max);
  if (g_rank == 0 && !g_failed_elsewhere.empty()) {
    std::string summary = std::to_string(g_failed_elsewhere.size()) + " test(s) failed on other ranks:\n";
    for (const auto& t : g_failed_elsewhere) summary += "[  FAILED  ] " + t + "\n";
    print(summary);
  }
  g_results.reset();
  mdtrain::mpi_finalize();
  return failed;
}
