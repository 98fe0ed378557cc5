#include "mdtrain/ops/resize_bilinear.h"

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/resize_bilinear_kernels.h"
#include "mdtrain/ops/cuda/resize_bilinear_kernels.h"
#include "mdtrain/ops/device_checks.h"

namespace mdtrain::ops {

namespace {

// The dims of small (the input images) resized to large, checked.
template <class T>
math::ResizeDims<T> dims_of(const char* op, const Tensor& small, const Tensor& large) {
  const bool ok = small.ndim() == 4 && large.ndim() == 4 && small.dim(0) == large.dim(0) &&
                  small.dim(3) == large.dim(3) && small.dim(1) > 0 && small.dim(2) > 0 &&
                  large.dim(1) % small.dim(1) == 0 && large.dim(2) % small.dim(2) == 0 &&
                  large.dim(1) >= small.dim(1) && large.dim(2) >= small.dim(2);
  MDTRAIN_CHECK(ok, std::invalid_argument, "[ops] ", op,
                ": expected images (batch, h, w, c) and (batch, h * fh, w * fw, c) for whole factors fh, fw >= 1, "
                "got ",
                to_string(small.shape()), " and ", to_string(large.shape()));
  return {small.dim(0),
          small.dim(1),
          small.dim(2),
          small.dim(3),
          large.dim(1),
          large.dim(2),
          static_cast<T>(small.dim(1)) / static_cast<T>(large.dim(1)),
          static_cast<T>(small.dim(2)) / static_cast<T>(large.dim(2))};
}

void check_tensors(const char* op, const Tensor& in, const char* in_name, const Tensor& out, const char* out_name) {
  MDTRAIN_CHECK(is_floating(in.dtype()) && in.dtype() == out.dtype(), std::invalid_argument, "[ops] ", op, ": ",
                in_name, " and ", out_name, " must have one floating dtype, got ", name_of(in.dtype()), " and ",
                name_of(out.dtype()));
  detail::require_usable_device("ops", op, out_name, out);
  detail::require_same_memory("ops", op, in_name, in, out);
}

}  // namespace

void resize_bilinear(const Tensor& x, Tensor& y) {
  check_tensors("resize_bilinear", x, "x", y, "y");
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    const auto d = dims_of<T>("resize_bilinear", x, y);
    if (!y.device().is_cpu()) return cuda::resize_bilinear(x, y, d);
    cpu::resize_bilinear<T>(x.data<T>(), y.data<T>(), d);
  });
}

void resize_bilinear_backward(const Tensor& dy, Tensor& dx) {
  check_tensors("resize_bilinear_backward", dy, "dy", dx, "dx");
  dispatch_floating(dy.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    const auto d = dims_of<T>("resize_bilinear_backward", dx, dy);
    if (!dx.device().is_cpu()) return cuda::resize_bilinear_backward(dy, dx, d);
    cpu::resize_bilinear_backward<T>(dy.data<T>(), dx.data<T>(), d);
  });
}

}  // namespace mdtrain::ops
