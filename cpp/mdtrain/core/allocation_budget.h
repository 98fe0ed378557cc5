#pragma once
// A cap on the host memory this thread may allocate while a budget is in scope. Loaders of files
// users hand us set one from what the file holds: a model file whose layer configs claim huge
// layers (units = 10^8 in a 4 KB file) then fails at its first oversized allocation, instead of
// allocating gigabytes before the weights are found not to match.
#include <cstddef>
#include <string>

#include "mdtrain/core/errors.h"

namespace mdtrain {

// Thrown by allocate() when a host allocation would exceed the innermost budget in scope.
class AllocationBudgetExceeded : public AllocationError {
 public:
  using AllocationError::AllocationError;
};

class AllocationBudget {
 public:
  // `bytes`: what allocations on this thread may add up to while this object lives (nested
  // budgets: the innermost applies). `what` names the budget in the error.
  AllocationBudget(std::size_t bytes, std::string what);
  ~AllocationBudget();
  AllocationBudget(const AllocationBudget&) = delete;
  AllocationBudget& operator=(const AllocationBudget&) = delete;

  // Called by allocate() for every host allocation: counts `bytes` against the innermost budget
  // of this thread, if any; throws AllocationBudgetExceeded (nothing counted) past it.
  static void charge(std::size_t bytes);

 private:
  std::size_t limit_;
  std::size_t used_ = 0;
  std::string what_;
  AllocationBudget* outer_;
};

}  // namespace mdtrain
