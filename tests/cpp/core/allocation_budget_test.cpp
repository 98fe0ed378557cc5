// An allocation budget caps this thread's host allocations while it is in scope (loaders of
// untrusted files), nests, and leaves other threads alone.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "mdtrain/core/allocation_budget.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain {
namespace {

TEST(AllocationBudget, RefusesTheFirstAllocationPastItAndNamesIt) {
  AllocationBudget budget(4096, "loading 'm.mdtrain'");
  Tensor small({256}, DType::Float32);  // 1 KiB: within
  try {
    Tensor big({1024}, DType::Float32);  // 4 KiB more: past the budget
    FAIL() << "allocated past the budget";
  } catch (const AllocationBudgetExceeded& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("loading 'm.mdtrain'"), std::string::npos) << what;
    EXPECT_NE(what.find("4096 bytes would exceed the 4096 bytes allowed (1024 already allocated)"), std::string::npos)
        << what;
  }
  Tensor fits({768}, DType::Float32);  // the refused one was not counted: 1 KiB + 3 KiB = 4 KiB
}

TEST(AllocationBudget, NestsAndEndsWithItsScope) {
  {
    AllocationBudget outer(1 << 20, "outer");
    {
      AllocationBudget inner(64, "inner");
      EXPECT_THROW(Tensor({1024}, DType::Float32), AllocationBudgetExceeded);
    }
    Tensor ok({1024}, DType::Float32);  // the outer budget applies again
    EXPECT_THROW(Tensor({1 << 20}, DType::Float32), AllocationBudgetExceeded);
  }
  Tensor unlimited({1 << 20}, DType::Float32);  // no budget in scope
}

TEST(AllocationBudget, OtherThreadsAreNotCharged) {
  AllocationBudget budget(64, "this thread");
  bool allocated = false;
  std::thread other([&] {
    Tensor t({1 << 16}, DType::Float32);
    allocated = true;
  });
  other.join();
  EXPECT_TRUE(allocated);
}

}  // namespace
}  // namespace mdtrain
