#include "mdtrain/ops/depthwise_conv.h"

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/depthwise_conv_kernels.h"
#include "mdtrain/ops/cuda/depthwise_conv_kernels.h"
#include "mdtrain/ops/device_checks.h"

namespace mdtrain::ops {

namespace {

void check_geometry(const char* op, const Window2D& g, std::int64_t dm) {
  MDTRAIN_CHECK(g.in_h > 0 && g.in_w > 0 && g.channels > 0 && g.k_h > 0 && g.k_w > 0 && g.stride_h > 0 &&
                    g.stride_w > 0 && g.dilation_h > 0 && g.dilation_w > 0 && g.pad_top >= 0 && g.pad_left >= 0 &&
                    g.out_h > 0 && g.out_w > 0 && dm > 0,
                std::invalid_argument, "[", op, "] invalid window: input ", g.in_h, "x", g.in_w, "x", g.channels,
                ", kernel ", g.k_h, "x", g.k_w, ", strides ", g.stride_h, "x", g.stride_w, ", dilation ", g.dilation_h,
                "x", g.dilation_w, ", output ", g.out_h, "x", g.out_w, ", depth_multiplier ", dm);
}

// `t` must have `shape`, the dtype of `like` and live in its memory.
void require(const char* op, const Tensor& t, const char* what, const Shape& shape, const Tensor& like) {
  MDTRAIN_CHECK(t.defined(), std::invalid_argument, "[", op, "] ", what, " is undefined");
  detail::require_usable_device(op, nullptr, what, t);
  MDTRAIN_CHECK(is_floating(t.dtype()) && t.dtype() == like.dtype(), std::invalid_argument, "[", op, "] ", what,
                " must be a float tensor of ", name_of(like.dtype()), ", got ", name_of(t.dtype()));
  MDTRAIN_CHECK(t.shape() == shape, std::invalid_argument, "[", op, "] ", what, " has shape ", to_string(t.shape()),
                ", expected ", to_string(shape));
  if (&t != &like) detail::require_same_memory(op, nullptr, what, t, like);
}

// The images of the call: x's (or dx's) first dimension.
std::int64_t images_of(const Tensor& t) { return t.ndim() == 4 ? t.dim(0) : 0; }

Shape input_shape(const Window2D& g, std::int64_t images) { return {images, g.in_h, g.in_w, g.channels}; }
Shape output_shape(const Window2D& g, std::int64_t dm, std::int64_t images) {
  return {images, g.out_h, g.out_w, g.channels * dm};
}
Shape kernel_shape(const Window2D& g, std::int64_t dm) { return {g.k_h, g.k_w, g.channels, dm}; }

}  // namespace

void depthwise_conv2d(const Tensor& x, const Tensor& kernel, const Window2D& g, std::int64_t dm, Tensor& y) {
  const char* op = "depthwise_conv2d";
  check_geometry(op, g, dm);
  const std::int64_t images = images_of(x);
  require(op, x, "x", input_shape(g, images), x);
  require(op, kernel, "kernel", kernel_shape(g, dm), x);
  require(op, y, "y", output_shape(g, dm, images), x);
  if (!x.device().is_cpu()) return cuda::depthwise_conv2d(x, kernel, g, dm, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::depthwise_conv2d<T>(x.data<T>(), kernel.data<T>(), images, g, dm, y.data<T>());
  });
}

void depthwise_conv2d_input_grad(const Tensor& dy, const Tensor& kernel, const Window2D& g, std::int64_t dm,
                                 Tensor& dx) {
  const char* op = "depthwise_conv2d_input_grad";
  check_geometry(op, g, dm);
  const std::int64_t images = images_of(dx);
  require(op, dx, "dx", input_shape(g, images), dx);
  require(op, dy, "dy", output_shape(g, dm, images), dx);
  require(op, kernel, "kernel", kernel_shape(g, dm), dx);
  if (!dx.device().is_cpu()) return cuda::depthwise_conv2d_input_grad(dy, kernel, g, dm, dx);
  dispatch_floating(dx.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::depthwise_conv2d_input_grad<T>(dy.data<T>(), kernel.data<T>(), images, g, dm, dx.data<T>());
  });
}

void depthwise_conv2d_kernel_grad(const Tensor& x, const Tensor& dy, const Window2D& g, std::int64_t dm,
                                  Tensor& dkernel) {
  const char* op = "depthwise_conv2d_kernel_grad";
  check_geometry(op, g, dm);
  const std::int64_t images = images_of(x);
  require(op, x, "x", input_shape(g, images), x);
  require(op, dy, "dy", output_shape(g, dm, images), x);
  require(op, dkernel, "dkernel", kernel_shape(g, dm), x);
  if (!x.device().is_cpu()) return cuda::depthwise_conv2d_kernel_grad(x, dy, g, dm, images, dkernel);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::depthwise_conv2d_kernel_grad<T>(x.data<T>(), dy.data<T>(), images, g, dm, dkernel.data<T>());
  });
}

}  // namespace mdtrain::ops
