#include "mdtrain/ops/normalization.h"

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/normalization_kernels.h"
#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/ops/device_checks.h"
#include "mdtrain/ops/cuda/normalization_kernels.h"

namespace mdtrain::ops {

namespace {

std::string describe(const Tensor& t) {
  return t.defined() ? cat(name_of(t.dtype()), " ", to_string(t.shape()), " on ", t.device().to_string())
                     : std::string("undefined");
}

// The first data tensor of a call decides where it runs; every other tensor lives there too.
void require_usable(const char* op, const char* what, const Tensor& x) {
  detail::require_usable_device("ops", op, what, x);
}

void require_same_memory(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  detail::require_same_memory("ops", op, what, t, x);
}

// x: a defined 2-D float32/float64 tensor on the host or a usable GPU.
void check_data(const char* op, const char* what, const Tensor& x) {
  MDTRAIN_CHECK(x.defined(), std::invalid_argument, "[ops] ", op, ": ", what, " is undefined");
  require_usable(op, what, x);
  MDTRAIN_CHECK(is_floating(x.dtype()) && x.ndim() == 2, std::invalid_argument, "[ops] ", op, ": ", what,
                " must be a 2-D float32 or float64 tensor (rows, channels), got ", describe(x));
}

// t has x's shape, dtype and device (and is not x itself when it is an output).
void check_like(const char* op, const char* what, const Tensor& t, const Tensor& x, bool output) {
  MDTRAIN_CHECK(t.defined() && t.shape() == x.shape() && t.dtype() == x.dtype(), std::invalid_argument, "[ops] ", op,
                ": ", what, " must be ", name_of(x.dtype()), " ", to_string(x.shape()), ", got ", describe(t));
  require_same_memory(op, what, t, x);
  MDTRAIN_CHECK(!output || x.numel() == 0 || !t.same_storage(x), std::invalid_argument, "[ops] ", op, ": ", what,
                " must not alias the input");
}

// A float64 statistics tensor of n elements on x's device.
void check_stats(const char* op, const char* what, const Tensor& s, std::int64_t n, const Tensor& x) {
  MDTRAIN_CHECK(s.defined() && s.dtype() == DType::Float64 && s.numel() == n, std::invalid_argument, "[ops] ", op, ": ",
                what, " must be float64 with ", n, " elements, got ", describe(s));
  require_same_memory(op, what, s, x);
}

// gamma/beta: undefined, or (channels,) of x's dtype on x's device.
void check_affine(const char* op, const char* what, const Tensor& p, const Tensor& x) {
  if (!p.defined()) return;
  MDTRAIN_CHECK(p.dtype() == x.dtype() && p.numel() == x.dim(1), std::invalid_argument, "[ops] ", op, ": ", what,
                " must be ", name_of(x.dtype()), " (", x.dim(1), ",), got ", describe(p));
  require_same_memory(op, what, p, x);
}

template <class T>
const T* optional_data(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

void channel_moments(const Tensor& x, Tensor& mean, Tensor& variance) {
  check_data("channel_moments", "x", x);
  check_stats("channel_moments", "mean", mean, x.dim(1), x);
  check_stats("channel_moments", "variance", variance, x.dim(1), x);
  if (!x.device().is_cpu()) return cuda::channel_moments(x, mean, variance);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::channel_moments(x.data<T>(), x.dim(0), x.dim(1), mean.data<double>(), variance.data<double>());
  });
}

void channel_sums(const Tensor& x, const Tensor& shift, Tensor& sum, Tensor& sum_squares) {
  check_data("channel_sums", "x", x);
  check_stats("channel_sums", "shift", shift, x.dim(1), x);
  check_stats("channel_sums", "sum", sum, x.dim(1), x);
  check_stats("channel_sums", "sum_squares", sum_squares, x.dim(1), x);
  if (!x.device().is_cpu()) return cuda::channel_sums(x, shift, sum, sum_squares);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::channel_sums(x.data<T>(), x.dim(0), x.dim(1), shift.data<double>(), sum.data<double>(),
                      sum_squares.data<double>());
  });
}

void channel_normalize(const Tensor& x, const Tensor& mean, const Tensor& inv_std, const Tensor& gamma,
                       const Tensor& beta, Tensor* xhat, Tensor& y) {
  const char* op = "channel_normalize";
  check_data(op, "x", x);
  check_stats(op, "mean", mean, x.dim(1), x);
  check_stats(op, "inv_std", inv_std, x.dim(1), x);
  check_affine(op, "gamma", gamma, x);
  check_affine(op, "beta", beta, x);
  check_like(op, "y", y, x, true);
  if (xhat) check_like(op, "xhat", *xhat, x, true);
  if (!x.device().is_cpu()) return cuda::channel_normalize(x, mean, inv_std, gamma, beta, xhat, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::channel_normalize(x.data<T>(), x.dim(0), x.dim(1), mean.data<double>(), inv_std.data<double>(),
                           optional_data<T>(gamma), optional_data<T>(beta), xhat ? xhat->data<T>() : nullptr,
                           y.data<T>());
  });
}

void channel_grad_sums(const Tensor& dy, const Tensor& xhat, Tensor& sum_dy, Tensor& sum_dy_xhat) {
  const char* op = "channel_grad_sums";
  check_data(op, "dy", dy);
  check_like(op, "xhat", xhat, dy, false);
  check_stats(op, "sum_dy", sum_dy, dy.dim(1), dy);
  check_stats(op, "sum_dy_xhat", sum_dy_xhat, dy.dim(1), dy);
  if (!dy.device().is_cpu()) return cuda::channel_grad_sums(dy, xhat, sum_dy, sum_dy_xhat);
  dispatch_floating(dy.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::channel_grad_sums(dy.data<T>(), xhat.data<T>(), dy.dim(0), dy.dim(1), sum_dy.data<double>(),
                           sum_dy_xhat.data<double>());
  });
}

void channel_normalize_backward(const Tensor& dy, const Tensor& xhat, const Tensor& scale, const Tensor& mean_dy,
                                const Tensor& mean_dy_xhat, Tensor& dx) {
  const char* op = "channel_normalize_backward";
  check_data(op, "dy", dy);
  check_like(op, "xhat", xhat, dy, false);
  check_stats(op, "scale", scale, dy.dim(1), dy);
  check_stats(op, "mean_dy", mean_dy, dy.dim(1), dy);
  check_stats(op, "mean_dy_xhat", mean_dy_xhat, dy.dim(1), dy);
  check_like(op, "dx", dx, dy, false);
  MDTRAIN_CHECK(dy.numel() == 0 || !dx.same_storage(xhat), std::invalid_argument, "[ops] ", op,
                ": dx must not alias xhat");
  if (!dy.device().is_cpu()) return cuda::channel_normalize_backward(dy, xhat, scale, mean_dy, mean_dy_xhat, dx);
  dispatch_floating(dy.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::channel_normalize_backward(dy.data<T>(), xhat.data<T>(), dy.dim(0), dy.dim(1), scale.data<double>(),
                                    mean_dy.data<double>(), mean_dy_xhat.data<double>(), dx.data<T>());
  });
}

void row_normalize(const Tensor& x, double epsilon, const Tensor& gamma, const Tensor& beta, Tensor& xhat,
                   Tensor& inv_std, Tensor& y) {
  const char* op = "row_normalize";
  check_data(op, "x", x);
  MDTRAIN_CHECK(x.dim(1) > 0, std::invalid_argument, "[ops] ", op, ": x needs at least one channel, got shape ",
                to_string(x.shape()));
  MDTRAIN_CHECK(epsilon >= 0, std::invalid_argument, "[ops] ", op, ": epsilon must be >= 0, got ", epsilon);
  check_affine(op, "gamma", gamma, x);
  check_affine(op, "beta", beta, x);
  check_like(op, "xhat", xhat, x, true);
  check_like(op, "y", y, x, true);
  check_stats(op, "inv_std", inv_std, x.dim(0), x);
  if (!x.device().is_cpu()) return cuda::row_normalize(x, epsilon, gamma, beta, xhat, inv_std, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::row_normalize(x.data<T>(), x.dim(0), x.dim(1), epsilon, optional_data<T>(gamma), optional_data<T>(beta),
                       xhat.data<T>(), inv_std.data<double>(), y.data<T>());
  });
}

void row_normalize_backward(const Tensor& dy, const Tensor& xhat, const Tensor& inv_std, const Tensor& gamma,
                            Tensor& dx) {
  const char* op = "row_normalize_backward";
  check_data(op, "dy", dy);
  check_like(op, "xhat", xhat, dy, false);
  check_stats(op, "inv_std", inv_std, dy.dim(0), dy);
  check_affine(op, "gamma", gamma, dy);
  check_like(op, "dx", dx, dy, false);
  MDTRAIN_CHECK(dy.numel() == 0 || !dx.same_storage(xhat), std::invalid_argument, "[ops] ", op,
                ": dx must not alias xhat");
  if (!dy.device().is_cpu()) return cuda::row_normalize_backward(dy, xhat, inv_std, gamma, dx);
  dispatch_floating(dy.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::row_normalize_backward(dy.data<T>(), xhat.data<T>(), dy.dim(0), dy.dim(1), inv_std.data<double>(),
                                optional_data<T>(gamma), dx.data<T>());
  });
}

}  // namespace mdtrain::ops
