#include "mdtrain/ops/recurrent.h"

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/core/threading/thread_team.h"
#include "mdtrain/ops/cpu/recurrent_kernels.h"
#include "mdtrain/ops/cuda/recurrent_kernels.h"
#include "mdtrain/ops/device_checks.h"

namespace mdtrain::ops {

namespace {

void check(const char* op, const char* what, const Tensor& t, const Tensor& ref, std::int64_t cols) {
  MDTRAIN_CHECK(t.defined() && t.ndim() == 2 && t.dim(0) == ref.dim(0) && t.dim(1) == cols &&
                    t.dtype() == ref.dtype() && is_floating(t.dtype()),
                std::invalid_argument, "[recurrent] ", op, ": ", what, " must be ", name_of(ref.dtype()), " (",
                ref.dim(0), ", ", cols, "), got ", t.defined() ? to_string(t.shape()) : std::string("undefined"));
  // Every tensor in ref's memory (the host or one GPU this process can use): the op runs there.
  detail::require_usable_device("recurrent", op, what, t);
  detail::require_same_memory("recurrent", op, what, t, ref);
}

// Rows are split over the intra-op threads only for large steps: a step runs once per time step,
// between two small GEMMs, and a team wake-up per step cost more than it saved (perf, LSTM(128),
// batch 128: ~30% of the time in the team's wait at 1 << 14).
constexpr std::int64_t kSplitElements = std::int64_t{1} << 18;

}  // namespace

void lstm_step_forward(const Tensor& z, const Tensor& c_prev, Tensor& gates, Tensor& c, Tensor& h) {
  MDTRAIN_CHECK(z.defined() && z.ndim() == 2 && z.dim(1) % 4 == 0, std::invalid_argument,
                "[recurrent] lstm_step_forward: z must be (rows, 4 * units)");
  const std::int64_t units = z.dim(1) / 4, rows = z.dim(0);
  check("lstm_step_forward", "z", z, z, 4 * units);
  check("lstm_step_forward", "c_prev", c_prev, z, units);
  check("lstm_step_forward", "gates", gates, z, 4 * units);
  check("lstm_step_forward", "c", c, z, units);
  check("lstm_step_forward", "h", h, z, units);
  if (!z.device().is_cpu()) return cuda::lstm_step_forward(z, c_prev, gates, c, h);
  dispatch_floating(z.dtype(), "recurrent", [&](auto tag) {
    using T = decltype(tag);
    cpu::run_in_ranges(rows, rows * units >= kSplitElements, [&](std::int64_t lo, std::int64_t hi) {
      cpu::lstm_step_forward<T>(z.data<T>(), c_prev.data<T>(), units, lo, hi, gates.data<T>(), c.data<T>(),
                                h.data<T>());
    });
  });
}

void lstm_step_backward(const Tensor& gates, const Tensor& c_prev, const Tensor& c, const Tensor& dh, Tensor& dc,
                        Tensor& dz) {
  MDTRAIN_CHECK(gates.defined() && gates.ndim() == 2 && gates.dim(1) % 4 == 0, std::invalid_argument,
                "[recurrent] lstm_step_backward: gates must be (rows, 4 * units)");
  const std::int64_t units = gates.dim(1) / 4, rows = gates.dim(0);
  check("lstm_step_backward", "c_prev", c_prev, gates, units);
  check("lstm_step_backward", "c", c, gates, units);
  check("lstm_step_backward", "dh", dh, gates, units);
  check("lstm_step_backward", "dc", dc, gates, units);
  check("lstm_step_backward", "dz", dz, gates, 4 * units);
  if (!gates.device().is_cpu()) return cuda::lstm_step_backward(gates, c_prev, c, dh, dc, dz);
  dispatch_floating(gates.dtype(), "recurrent", [&](auto tag) {
    using T = decltype(tag);
    cpu::run_in_ranges(rows, rows * units >= kSplitElements, [&](std::int64_t lo, std::int64_t hi) {
      cpu::lstm_step_backward<T>(gates.data<T>(), c_prev.data<T>(), c.data<T>(), dh.data<T>(), units, lo, hi,
                                 dc.data<T>(), dz.data<T>());
    });
  });
}

void gru_step_forward(const Tensor& xz, const Tensor& hz, const Tensor& h_prev, Tensor& gates, Tensor& h) {
  MDTRAIN_CHECK(xz.defined() && xz.ndim() == 2 && xz.dim(1) % 3 == 0, std::invalid_argument,
                "[recurrent] gru_step_forward: xz must be (rows, 3 * units)");
  const std::int64_t units = xz.dim(1) / 3, rows = xz.dim(0);
  check("gru_step_forward", "xz", xz, xz, 3 * units);
  check("gru_step_forward", "hz", hz, xz, 3 * units);
  check("gru_step_forward", "h_prev", h_prev, xz, units);
  check("gru_step_forward", "gates", gates, xz, 3 * units);
  check("gru_step_forward", "h", h, xz, units);
  if (!xz.device().is_cpu()) return cuda::gru_step_forward(xz, hz, h_prev, gates, h);
  dispatch_floating(xz.dtype(), "recurrent", [&](auto tag) {
    using T = decltype(tag);
    cpu::run_in_ranges(rows, rows * units >= kSplitElements, [&](std::int64_t lo, std::int64_t hi) {
      cpu::gru_step_forward<T>(xz.data<T>(), hz.data<T>(), h_prev.data<T>(), units, lo, hi, gates.data<T>(),
                               h.data<T>());
    });
  });
}

void gru_step_backward(const Tensor& gates, const Tensor& hz, const Tensor& h_prev, const Tensor& dh, Tensor& dx,
                       Tensor& dhz, Tensor& dh_prev) {
  MDTRAIN_CHECK(gates.defined() && gates.ndim() == 2 && gates.dim(1) % 3 == 0, std::invalid_argument,
                "[recurrent] gru_step_backward: gates must be (rows, 3 * units)");
  const std::int64_t units = gates.dim(1) / 3, rows = gates.dim(0);
  check("gru_step_backward", "hz", hz, gates, 3 * units);
  check("gru_step_backward", "h_prev", h_prev, gates, units);
  check("gru_step_backward", "dh", dh, gates, units);
  check("gru_step_backward", "dx", dx, gates, 3 * units);
  check("gru_step_backward", "dhz", dhz, gates, 3 * units);
  if (dh_prev.defined()) check("gru_step_backward", "dh_prev", dh_prev, gates, units);
  if (!gates.device().is_cpu()) return cuda::gru_step_backward(gates, hz, h_prev, dh, dx, dhz, dh_prev);
  dispatch_floating(gates.dtype(), "recurrent", [&](auto tag) {
    using T = decltype(tag);
    T* direct = dh_prev.defined() ? dh_prev.data<T>() : nullptr;
    cpu::run_in_ranges(rows, rows * units >= kSplitElements, [&](std::int64_t lo, std::int64_t hi) {
      cpu::gru_step_backward<T>(gates.data<T>(), hz.data<T>(), h_prev.data<T>(), dh.data<T>(), units, lo, hi,
                                dx.data<T>(), dhz.data<T>(), direct);
    });
  });
}

void add_masked(const Tensor& g, const Tensor& mask, Tensor& acc) {
  MDTRAIN_CHECK(acc.defined() && acc.ndim() == 2, std::invalid_argument, "[recurrent] add_masked: acc must be 2-D");
  check("add_masked", "g", g, acc, acc.dim(1));
  check("add_masked", "mask", mask, acc, acc.dim(1));
  check("add_masked", "acc", acc, acc, acc.dim(1));
  if (!acc.device().is_cpu()) return cuda::add_masked(g, mask, acc);
  dispatch_floating(acc.dtype(), "recurrent", [&](auto tag) {
    using T = decltype(tag);
    const T *gp = g.data<T>(), *mp = mask.data<T>();
    T* ap = acc.data<T>();
    cpu::add_masked<T>(gp, mp, acc.numel(), ap);
  });
}

}  // namespace mdtrain::ops
