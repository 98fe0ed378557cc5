#include "mdtrain/ops/parametric_activation.h"

#include <vector>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/activation_layer_kernels.h"
#include "mdtrain/ops/cuda/activation_layer_kernels.h"
#include "mdtrain/ops/device_checks.h"
#include "mdtrain/ops/over_axes.h"

namespace mdtrain::ops {

namespace {

// `t` is a defined floating tensor of `like`'s shape and dtype, in its memory.
void check_like(const char* op, const char* what, const Tensor& t, const char* like_what, const Tensor& like) {
  MDTRAIN_CHECK(t.defined() && like.defined(), std::invalid_argument, "[ops] ", op, ": ", what, " and ", like_what,
                " must be defined");
  MDTRAIN_CHECK(is_floating(like.dtype()) && t.dtype() == like.dtype() && t.shape() == like.shape(),
                std::invalid_argument, "[ops] ", op, ": ", what, " must be ", like_what, "'s floating dtype and shape ",
                name_of(like.dtype()), " ", to_string(like.shape()), ", got ", name_of(t.dtype()), " ",
                to_string(t.shape()));
  detail::require_usable_device("ops", op, what, t);
  detail::require_same_memory("ops", op, what, t, like, like_what);
}

// The rows of x along the batch and alpha's shared axes: one row per alpha element, in alpha's order.
math::AxesPlan alpha_rows(const char* op, const Tensor& x, const Tensor& alpha) {
  MDTRAIN_CHECK(alpha.defined() && alpha.dtype() == x.dtype() && alpha.ndim() + 1 == x.ndim(), std::invalid_argument,
                "[ops] ", op, ": alpha must be ", name_of(x.dtype()), " of x's shape without the batch, got ",
                alpha.defined() ? name_of(alpha.dtype()) : "undefined", " ", to_string(alpha.shape()), " for x ",
                to_string(x.shape()));
  std::vector<int> reduced{0};
  for (int d = 0; d < alpha.ndim(); ++d) {
    const std::int64_t a = alpha.dim(d), n = x.dim(d + 1);
    MDTRAIN_CHECK(a == n || a == 1, std::invalid_argument, "[ops] ", op, ": alpha ", to_string(alpha.shape()),
                  " does not broadcast over x ", to_string(x.shape()), " (each axis 1 or x's)");
    if (a == 1 && n != 1) reduced.push_back(d + 1);
  }
  detail::require_same_memory("ops", op, "alpha", alpha, x, "x");
  return axes_plan(op, x.shape(), reduced);
}

}  // namespace

void parametric_activation(const Tensor& x, const ParametricActivation& a, Tensor& y) {
  check_like("parametric_activation", "y", y, "x", x);
  if (x.numel() == 0) return;
  if (!y.device().is_cpu()) return cuda::parametric_activation(x, a, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::parametric_activation<T>(x.data<T>(), x.numel(), a, y.data<T>());
  });
}

void parametric_activation_backward(const ParametricActivation& a, const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_like("parametric_activation_backward", "dy", dy, "x", x);
  check_like("parametric_activation_backward", "dx", dx, "x", x);
  if (x.numel() == 0) return;
  if (!dx.device().is_cpu()) return cuda::parametric_activation_backward(a, x, dy, dx);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::parametric_activation_backward<T>(a, x.data<T>(), dy.data<T>(), x.numel(), dx.data<T>());
  });
}

void prelu(const Tensor& x, const Tensor& alpha, Tensor& y) {
  check_like("prelu", "y", y, "x", x);
  const math::AxesPlan plan = alpha_rows("prelu", x, alpha);
  if (x.numel() == 0) return;
  if (!y.device().is_cpu()) return cuda::prelu(x, alpha, plan, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::prelu<T>(x.data<T>(), alpha.data<T>(), x.numel(), plan, y.data<T>());
  });
}

void prelu_backward(const Tensor& x, const Tensor& alpha, const Tensor& dy, Tensor* dx, Tensor& dalpha) {
  check_like("prelu_backward", "dy", dy, "x", x);
  check_like("prelu_backward", "dalpha", dalpha, "alpha", alpha);
  if (dx) check_like("prelu_backward", "dx", *dx, "x", x);
  const math::AxesPlan plan = alpha_rows("prelu_backward", x, alpha);
  if (x.numel() == 0) {
    dalpha.fill(0.0);
    return;
  }
  if (!dalpha.device().is_cpu()) return cuda::prelu_backward(x, alpha, dy, plan, dx, dalpha);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::prelu_backward<T>(x.data<T>(), alpha.data<T>(), dy.data<T>(), x.numel(), plan, dx ? dx->data<T>() : nullptr,
                           dalpha.data<T>());
  });
}

}  // namespace mdtrain::ops
