#include "mdtrain/core/allocation_budget.h"

#include <utility>

namespace mdtrain {
namespace {
thread_local AllocationBudget* innermost = nullptr;
}  // namespace

AllocationBudget::AllocationBudget(std::size_t bytes, std::string what)
    : limit_(bytes), what_(std::move(what)), outer_(innermost) {
  innermost = this;
}

AllocationBudget::~AllocationBudget() { innermost = outer_; }

void AllocationBudget::charge(std::size_t bytes) {
  AllocationBudget* b = innermost;
  if (!b) return;
  if (bytes > b->limit_ - b->used_)
    fail<AllocationBudgetExceeded>("[allocator] ", b->what_, ": allocating ", bytes, " bytes would exceed the ",
                                   b->limit_, " bytes allowed (", b->used_, " already allocated)");
  b->used_ += bytes;
}

}  // namespace mdtrain
