#pragma once
// Where the tensors of one op call may live, checked the same way by every op file (ops.cpp,
// loss_ops.cpp, conv_ops.cpp, normalization.cpp): all in one memory — the host (logical CPU
// devices share it) or one GPU this process can use — where the op then runs (cpu:: or cuda::
// kernels). Internal to ops/.
#include "mdtrain/core/tensor.h"

namespace mdtrain::ops::detail {

inline bool same_memory(const Device& a, const Device& b) { return a == b || (a.is_cpu() && b.is_cpu()); }

// Messages start "[<area>] " then "<op>: " when op is not null, then "<what> is on <device>".
// Throws std::invalid_argument "...: <why>" unless t is on the host or a GPU this process sees
// (a CPU-only build sees none: the reason says so).
void require_usable_device(const char* area, const char* op, const char* what, const Tensor& t);
// Throws std::invalid_argument "... but <reference_what> on <reference's device>" unless t is in
// the same memory as `reference`.
void require_same_memory(const char* area, const char* op, const char* what, const Tensor& t, const Tensor& reference,
                         const char* reference_what = "the other tensors are");

}  // namespace mdtrain::ops::detail
