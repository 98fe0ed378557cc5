#include "mdtrain/ops/device_checks.h"

#include <string>

#include "mdtrain/core/errors.h"
#include "mdtrain/core/cuda/runtime.h"

namespace mdtrain::ops::detail {

namespace {
std::string subject(const char* area, const char* op, const char* what, const Tensor& t) {
  return cat("[", area, "] ", op ? cat(op, ": ") : std::string(), what, " is on ", t.device().to_string());
}
}  // namespace

void require_usable_device(const char* area, const char* op, const char* what, const Tensor& t) {
  const Device& d = t.device();
  if (d.is_cpu() || d.index < cuda::device_count()) return;
  fail<std::invalid_argument>(subject(area, op, what, t), ": ",
                              cuda::device_count() == 0 ? cuda::unavailable_reason()
                                                        : cat("this process sees ", cuda::device_count(), " GPU(s)"));
}

void require_same_memory(const char* area, const char* op, const char* what, const Tensor& t, const Tensor& reference,
                         const char* reference_what) {
  if (same_memory(t.device(), reference.device())) return;
  fail<std::invalid_argument>(subject(area, op, what, t), " but ", reference_what, " on ",
                              reference.device().to_string());
}

}  // namespace mdtrain::ops::detail
