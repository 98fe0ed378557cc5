#include "mdtrain/ops/noise.h"

#include <cmath>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/noise_kernels.h"
#include "mdtrain/ops/cuda/noise_kernels.h"
#include "mdtrain/ops/device_checks.h"

namespace mdtrain::ops {

namespace {

// One floating dtype, one memory, equal element counts.
void check_pair(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  MDTRAIN_CHECK(is_floating(a.dtype()) && a.dtype() == b.dtype(), std::invalid_argument, "[ops] ", op, ": ", a_name,
                " and ", b_name, " must have one floating dtype, got ", name_of(a.dtype()), " and ",
                name_of(b.dtype()));
  detail::require_usable_device("ops", op, a_name, a);
  detail::require_same_memory("ops", op, b_name, b, a);
  MDTRAIN_CHECK(a.numel() == b.numel(), std::invalid_argument, "[ops] ", op, ": ", a_name, " ", to_string(a.shape()),
                " and ", b_name, " ", to_string(b.shape()), " differ in size");
}

void check_nonnegative(const char* op, const char* what, double v) {
  MDTRAIN_CHECK(v >= 0.0 && std::isfinite(v), std::invalid_argument, "[ops] ", op, ": ", what,
                " must be a finite number >= 0, got ", v);
}

}  // namespace

void gaussian_noise(const Tensor& x, double stddev, std::uint64_t seed, std::uint64_t stream,
                    std::uint64_t first_element, Tensor& y) {
  check_pair("gaussian_noise", x, "x", y, "y");
  check_nonnegative("gaussian_noise", "stddev", stddev);
  if (!x.device().is_cpu()) return cuda::gaussian_noise(x, stddev, seed, stream, first_element, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::gaussian_noise<T>(x.data<T>(), x.numel(), stddev, seed, stream, first_element, y.data<T>());
  });
}

void gaussian_dropout(const Tensor& x, double stddev, std::uint64_t seed, std::uint64_t stream,
                      std::uint64_t first_element, Tensor& multiplier, Tensor& y) {
  check_pair("gaussian_dropout", x, "x", y, "y");
  check_pair("gaussian_dropout", x, "x", multiplier, "multiplier");
  check_nonnegative("gaussian_dropout", "stddev", stddev);
  if (!x.device().is_cpu()) return cuda::gaussian_dropout(x, stddev, seed, stream, first_element, multiplier, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::gaussian_dropout<T>(x.data<T>(), x.numel(), stddev, seed, stream, first_element, multiplier.data<T>(),
                             y.data<T>());
  });
}

void dropout_mask(double rate, std::uint64_t seed, std::uint64_t stream, std::uint64_t first_element, Tensor& mask) {
  MDTRAIN_CHECK(is_floating(mask.dtype()), std::invalid_argument, "[ops] dropout_mask: mask must be floating, got ",
                name_of(mask.dtype()));
  detail::require_usable_device("ops", "dropout_mask", "mask", mask);
  MDTRAIN_CHECK(rate >= 0.0 && rate < 1.0, std::invalid_argument, "[ops] dropout_mask: rate must be in [0, 1), got ",
                rate);
  if (!mask.device().is_cpu()) return cuda::dropout_mask(rate, seed, stream, first_element, mask);
  dispatch_floating(mask.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::dropout_mask<T>(mask.numel(), rate, seed, stream, first_element, mask.data<T>());
  });
}

void scale_channels(const Tensor& x, const Tensor& mask, Tensor& y) {
  check_pair("scale_channels", x, "x", y, "y");
  MDTRAIN_CHECK(mask.dtype() == x.dtype(), std::invalid_argument, "[ops] scale_channels: mask must be ",
                name_of(x.dtype()), ", got ", name_of(mask.dtype()));
  detail::require_same_memory("ops", "scale_channels", "mask", mask, x);
  const bool fits = x.ndim() >= 2 && mask.ndim() == 2 && mask.dim(0) == x.dim(0) && mask.dim(1) == x.dim(x.ndim() - 1);
  MDTRAIN_CHECK(fits, std::invalid_argument, "[ops] scale_channels: expected x (rows, ..., channels) and mask ",
                "(rows, channels), got ", to_string(x.shape()), " and ", to_string(mask.shape()));
  const std::int64_t rows = x.dim(0), channels = mask.dim(1);
  const std::int64_t inner = rows * channels == 0 ? 0 : x.numel() / (rows * channels);
  if (!x.device().is_cpu()) return cuda::scale_channels(x, mask, inner, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::scale_channels<T>(x.data<T>(), mask.data<T>(), rows, inner, channels, y.data<T>());
  });
}

double activity_penalty(const Tensor& x, double l1, double l2) {
  MDTRAIN_CHECK(is_floating(x.dtype()), std::invalid_argument, "[ops] activity_penalty: x must be floating, got ",
                name_of(x.dtype()));
  detail::require_usable_device("ops", "activity_penalty", "x", x);
  check_nonnegative("activity_penalty", "l1", l1);
  check_nonnegative("activity_penalty", "l2", l2);
  if (!x.device().is_cpu()) return cuda::activity_penalty(x, l1, l2);
  return dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    return cpu::activity_penalty<T>(x.data<T>(), x.numel(), l1, l2);
  });
}

void activity_penalty_backward(const Tensor& x, const Tensor& dy, double l1, double l2, double scale, Tensor& dx) {
  check_pair("activity_penalty_backward", x, "x", dy, "dy");
  check_pair("activity_penalty_backward", x, "x", dx, "dx");
  if (!x.device().is_cpu()) return cuda::activity_penalty_backward(x, dy, l1 * scale, l2 * scale, dx);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::activity_penalty_backward<T>(x.data<T>(), dy.data<T>(), x.numel(), static_cast<T>(l1 * scale),
                                      static_cast<T>(l2 * scale), dx.data<T>());
  });
}

}  // namespace mdtrain::ops
