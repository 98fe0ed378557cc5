#include "mdtrain/ops/accumulate.h"

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/accumulate_kernels.h"
#include "mdtrain/ops/cuda/accumulate_kernels.h"
#include "mdtrain/ops/device_checks.h"

namespace mdtrain::ops {

void add_into(Tensor& acc, const Tensor& x) {
  MDTRAIN_CHECK(is_floating(acc.dtype()), std::invalid_argument, "[add_into] expected a float tensor, got ",
                name_of(acc.dtype()));
  MDTRAIN_CHECK(acc.dtype() == x.dtype(), std::invalid_argument, "[add_into] dtype mismatch: ", name_of(acc.dtype()),
                " vs x ", name_of(x.dtype()));
  MDTRAIN_CHECK(acc.numel() == x.numel(), std::invalid_argument, "[add_into] sizes differ: ", to_string(acc.shape()),
                ", ", to_string(x.shape()));
  detail::require_usable_device("add_into", nullptr, "acc", acc);
  detail::require_same_memory("add_into", nullptr, "x", x, acc);
  if (!acc.device().is_cpu()) return cuda::add_into(acc, x);
  dispatch_floating(acc.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::add_into<T>(acc.data<T>(), x.data<T>(), acc.numel());
  });
}

}  // namespace mdtrain::ops
