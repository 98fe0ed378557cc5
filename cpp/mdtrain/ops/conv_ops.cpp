#include "mdtrain/ops/conv_ops.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/conv_kernels.h"
#include "mdtrain/core/threading/thread_team.h"
#include "mdtrain/ops/cuda/conv_kernels.h"
#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/ops/device_checks.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain::ops {

namespace {

void require_float(const char* op, const Tensor& t, const char* what) {
  MDTRAIN_CHECK(t.defined(), std::invalid_argument, "[", op, "] ", what, " is undefined");
  detail::require_usable_device(op, nullptr, what, t);
  MDTRAIN_CHECK(is_floating(t.dtype()), std::invalid_argument, "[", op, "] ", what, " must be a float tensor, got ",
                name_of(t.dtype()));
}

void require_same_device(const char* op, const Tensor& a, const Tensor& b, const char* what_b) {
  detail::require_same_memory(op, nullptr, what_b, b, a);
}

void require_same_dtype(const char* op, const Tensor& a, const Tensor& b, const char* what_b) {
  require_float(op, b, what_b);
  MDTRAIN_CHECK(a.dtype() == b.dtype(), std::invalid_argument, "[", op, "] dtype mismatch: ", name_of(a.dtype()),
                " vs ", what_b, " ", name_of(b.dtype()));
  require_same_device(op, a, b, what_b);
}

// Max pooling's argmax: Int32, the output's shape, in the output's memory.
void require_argmax(const char* op, const Tensor& argmax, const Tensor& y) {
  MDTRAIN_CHECK(argmax.defined() && argmax.dtype() == DType::Int32 && argmax.shape() == y.shape(),
                std::invalid_argument, "[", op, "] argmax must be an int32 tensor of shape ", to_string(y.shape()));
  require_same_device(op, y, argmax, "argmax");
}

void check_window(const char* op, const Window2D& g) {
  MDTRAIN_CHECK(g.in_h > 0 && g.in_w > 0 && g.channels > 0 && g.k_h > 0 && g.k_w > 0 && g.stride_h > 0 &&
                    g.stride_w > 0 && g.dilation_h > 0 && g.dilation_w > 0 && g.pad_top >= 0 && g.pad_left >= 0 &&
                    g.out_h > 0 && g.out_w > 0,
                std::invalid_argument, "[", op, "] invalid window: input ", g.in_h, "x", g.in_w, "x", g.channels,
                ", kernel ", g.k_h, "x", g.k_w, ", strides ", g.stride_h, "x", g.stride_w, ", dilation ", g.dilation_h,
                "x", g.dilation_w, ", output ", g.out_h, "x", g.out_w);
}

// x must be (images, in_h, in_w, channels) for the window; returns images.
std::int64_t images_of_input(const char* op, const Tensor& x, const Window2D& g, const char* what) {
  const Shape expected{x.ndim() > 0 ? x.dim(0) : 0, g.in_h, g.in_w, g.channels};
  MDTRAIN_CHECK(x.shape() == expected, std::invalid_argument, "[", op, "] ", what, " has shape ", to_string(x.shape()),
                ", expected (images, ", g.in_h, ", ", g.in_w, ", ", g.channels, ")");
  return x.dim(0);
}

void require_output(const char* op, const Tensor& y, std::int64_t images, const Window2D& g, const char* what) {
  const Shape expected{images, g.out_h, g.out_w, g.channels};
  MDTRAIN_CHECK(y.shape() == expected, std::invalid_argument, "[", op, "] ", what, " has shape ", to_string(y.shape()),
                ", expected ", to_string(expected));
}

void require_columns(const char* op, const Tensor& col, std::int64_t images, const Window2D& g) {
  const Shape expected{images * g.out_h * g.out_w, g.k_h * g.k_w * g.channels};
  MDTRAIN_CHECK(col.shape() == expected, std::invalid_argument, "[", op, "] col has shape ", to_string(col.shape()),
                ", expected ", to_string(expected), " for ", images, " images");
}

// col holds whole output rows [first_row, first_row + k) of a batch of `images`; returns k.
std::int64_t require_row_columns(const char* op, const Tensor& col, const Window2D& g, std::int64_t first_row,
                                 std::int64_t images) {
  const std::int64_t depth = g.k_h * g.k_w * g.channels;
  MDTRAIN_CHECK(col.ndim() == 2 && col.dim(1) == depth && col.dim(0) % g.out_w == 0, std::invalid_argument, "[", op,
                "] col has shape ", to_string(col.shape()), ", expected (k * ", g.out_w, ", ", depth,
                ") for k whole output rows");
  const std::int64_t rows = col.dim(0) / g.out_w;
  MDTRAIN_CHECK(first_row >= 0 && first_row + rows <= images * g.out_h, std::invalid_argument, "[", op,
                "] output rows [", first_row, ", ", first_row + rows, ") are outside the ", images * g.out_h,
                " rows of ", images, " images");
  return rows;
}

// Pooling is memory-bound: a pass over this many elements pays for waking the intra-op team.
constexpr std::int64_t kMinSplitElements = std::int64_t{1} << 17;

// Runs fn(first_image, last_image) over the batch, in runs of whole images on the intra-op team
// when the pass is large enough. Images are independent: the same bits however it is cut.
template <class F>
void over_image_runs(std::int64_t images, std::int64_t elements, F&& fn) {
  cpu::run_in_ranges(images, elements >= kMinSplitElements, std::forward<F>(fn));
}

// The checks of both col2im forms; returns the output rows col holds.
std::int64_t check_col2im(const Tensor& col, const Window2D& g, std::int64_t first_row, const Tensor& dx) {
  check_window("col2im", g);
  require_float("col2im", col, "col");
  require_same_dtype("col2im", col, dx, "dx");
  const std::int64_t images = images_of_input("col2im", dx, g, "dx");
  return require_row_columns("col2im", col, g, first_row, images);
}

template <class T>
void col2im_cpu(const Tensor& col, const Window2D& g, std::int64_t first_row, std::int64_t rows, Tensor& dx) {
  cpu::col2im_accumulate<T>(col.data<T>(), first_row, rows, g, dx.data<T>());
}

}  // namespace

Window2D make_window2d(std::int64_t in_h, std::int64_t in_w, std::int64_t channels, std::int64_t k_h, std::int64_t k_w,
                       std::int64_t stride_h, std::int64_t stride_w, std::int64_t dilation_h, std::int64_t dilation_w,
                       bool same_padding) {
  MDTRAIN_CHECK(in_h > 0 && in_w > 0 && channels > 0 && k_h > 0 && k_w > 0 && stride_h > 0 && stride_w > 0 &&
                    dilation_h > 0 && dilation_w > 0,
                std::invalid_argument, "[window2d] sizes, strides and dilations must be positive: input ", in_h, "x",
                in_w, "x", channels, ", kernel ", k_h, "x", k_w, ", strides ", stride_h, "x", stride_w, ", dilation ",
                dilation_h, "x", dilation_w);
  Window2D g;
  g.in_h = in_h;
  g.in_w = in_w;
  g.channels = channels;
  g.k_h = k_h;
  g.k_w = k_w;
  g.stride_h = stride_h;
  g.stride_w = stride_w;
  g.dilation_h = dilation_h;
  g.dilation_w = dilation_w;
  g.out_h = math::window_out_size(in_h, k_h, stride_h, dilation_h, same_padding);
  g.out_w = math::window_out_size(in_w, k_w, stride_w, dilation_w, same_padding);
  g.pad_top = math::window_pad_before(in_h, k_h, stride_h, dilation_h, same_padding);
  g.pad_left = math::window_pad_before(in_w, k_w, stride_w, dilation_w, same_padding);
  return g;
}

void im2col(const Tensor& x, const Window2D& g, std::int64_t first_row, Tensor& col) {
  check_window("im2col", g);
  require_float("im2col", x, "x");
  require_same_dtype("im2col", x, col, "col");
  const std::int64_t images = images_of_input("im2col", x, g, "x");
  const std::int64_t rows = require_row_columns("im2col", col, g, first_row, images);
  if (!x.device().is_cpu()) return cuda::im2col(x, g, first_row, col);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::im2col<T>(x.data<T>(), first_row, rows, g, col.data<T>());
  });
}

void im2col(const Tensor& x, const Window2D& g, Tensor& col) {
  check_window("im2col", g);
  require_float("im2col", col, "col");
  require_columns("im2col", col, x.ndim() > 0 ? x.dim(0) : 0, g);
  im2col(x, g, 0, col);
}

void col2im_accumulate(const Tensor& col, const Window2D& g, std::int64_t first_row, Tensor& dx) {
  const std::int64_t rows = check_col2im(col, g, first_row, dx);
  if (!dx.device().is_cpu()) return cuda::col2im(col, g, first_row, /*accumulate=*/true, dx);
  dispatch_floating(col.dtype(), "ops", [&](auto tag) { col2im_cpu<decltype(tag)>(col, g, first_row, rows, dx); });
}

void col2im(const Tensor& col, const Window2D& g, Tensor& dx) {
  check_window("col2im", g);
  require_float("col2im", dx, "dx");
  require_columns("col2im", col, dx.ndim() > 0 ? dx.dim(0) : 0, g);
  const std::int64_t rows = check_col2im(col, g, 0, dx);
  // The GPU's gather writes every element (0 where no window reads), so dx needs no clearing.
  if (!dx.device().is_cpu()) return cuda::col2im(col, g, 0, /*accumulate=*/false, dx);
  dx.fill(0.0);
  dispatch_floating(col.dtype(), "ops", [&](auto tag) { col2im_cpu<decltype(tag)>(col, g, 0, rows, dx); });
}

void max_pool2d(const Tensor& x, const Window2D& g, Tensor& y, Tensor& argmax) {
  check_window("max_pool2d", g);
  require_float("max_pool2d", x, "x");
  require_same_dtype("max_pool2d", x, y, "y");
  const std::int64_t images = images_of_input("max_pool2d", x, g, "x");
  require_output("max_pool2d", y, images, g, "y");
  require_argmax("max_pool2d", argmax, y);
  MDTRAIN_CHECK(g.in_h * g.in_w <= INT32_MAX, std::invalid_argument, "[max_pool2d] an image of ", g.in_h, "x", g.in_w,
                " pixels exceeds the 32-bit argmax index");
  if (!x.device().is_cpu()) return cuda::max_pool2d(x, g, y, argmax);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t in = g.in_h * g.in_w * g.channels, out = g.out_h * g.out_w * g.channels;
    over_image_runs(images, x.numel(), [&](std::int64_t i0, std::int64_t i1) {
      cpu::max_pool2d<T>(x.data<T>() + i0 * in, i1 - i0, g, y.data<T>() + i0 * out,
                         argmax.data<std::int32_t>() + i0 * out);
    });
  });
}

void max_pool2d_backward(const Tensor& dy, const Tensor& argmax, const Window2D& g, Tensor& dx) {
  check_window("max_pool2d_backward", g);
  require_float("max_pool2d_backward", dy, "dy");
  require_same_dtype("max_pool2d_backward", dy, dx, "dx");
  const std::int64_t images = images_of_input("max_pool2d_backward", dx, g, "dx");
  require_output("max_pool2d_backward", dy, images, g, "dy");
  require_argmax("max_pool2d_backward", argmax, dy);
  if (!dy.device().is_cpu()) return cuda::max_pool2d_backward(dy, argmax, g, dx);
  dispatch_floating(dy.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t in = g.in_h * g.in_w * g.channels, out = g.out_h * g.out_w * g.channels;
    over_image_runs(images, dx.numel(), [&](std::int64_t i0, std::int64_t i1) {
      cpu::max_pool2d_backward<T>(dy.data<T>() + i0 * out, argmax.data<std::int32_t>() + i0 * out, i1 - i0, g,
                                  dx.data<T>() + i0 * in);
    });
  });
}

void avg_pool2d(const Tensor& x, const Window2D& g, Tensor& y) {
  check_window("avg_pool2d", g);
  require_float("avg_pool2d", x, "x");
  require_same_dtype("avg_pool2d", x, y, "y");
  const std::int64_t images = images_of_input("avg_pool2d", x, g, "x");
  require_output("avg_pool2d", y, images, g, "y");
  if (!x.device().is_cpu()) return cuda::avg_pool2d(x, g, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t in = g.in_h * g.in_w * g.channels, out = g.out_h * g.out_w * g.channels;
    over_image_runs(images, x.numel(), [&](std::int64_t i0, std::int64_t i1) {
      cpu::avg_pool2d<T>(x.data<T>() + i0 * in, i1 - i0, g, y.data<T>() + i0 * out);
    });
  });
}

void avg_pool2d_backward(const Tensor& dy, const Window2D& g, Tensor& dx) {
  check_window("avg_pool2d_backward", g);
  require_float("avg_pool2d_backward", dy, "dy");
  require_same_dtype("avg_pool2d_backward", dy, dx, "dx");
  const std::int64_t images = images_of_input("avg_pool2d_backward", dx, g, "dx");
  require_output("avg_pool2d_backward", dy, images, g, "dy");
  if (!dy.device().is_cpu()) return cuda::avg_pool2d_backward(dy, g, dx);
  dispatch_floating(dy.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t in = g.in_h * g.in_w * g.channels, out = g.out_h * g.out_w * g.channels;
    over_image_runs(images, dx.numel(), [&](std::int64_t i0, std::int64_t i1) {
      cpu::avg_pool2d_backward<T>(dy.data<T>() + i0 * out, i1 - i0, g, dx.data<T>() + i0 * in);
    });
  });
}

void global_avg_pool2d(const Tensor& x, Tensor& y) {
  require_float("global_avg_pool2d", x, "x");
  require_same_dtype("global_avg_pool2d", x, y, "y");
  MDTRAIN_CHECK(x.ndim() == 4 && x.dim(1) > 0 && x.dim(2) > 0, std::invalid_argument,
                "[global_avg_pool2d] x must be (images, height, width, channels) with a non-empty image, got ",
                to_string(x.shape()));
  const std::int64_t images = x.dim(0), pixels = x.dim(1) * x.dim(2), channels = x.dim(3);
  MDTRAIN_CHECK(y.numel() == images * channels, std::invalid_argument, "[global_avg_pool2d] y ", to_string(y.shape()),
                " does not hold ", images, " x ", channels, " means");
  if (!x.device().is_cpu()) return cuda::global_avg_pool2d(x, images, pixels, channels, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::global_avg_pool2d<T>(x.data<T>(), images, pixels, channels, y.data<T>());
  });
}

void global_avg_pool2d_backward(const Tensor& dy, Tensor& dx) {
  require_float("global_avg_pool2d_backward", dy, "dy");
  require_same_dtype("global_avg_pool2d_backward", dy, dx, "dx");
  MDTRAIN_CHECK(dx.ndim() == 4 && dx.dim(1) > 0 && dx.dim(2) > 0, std::invalid_argument,
                "[global_avg_pool2d_backward] dx must be (images, height, width, channels), got ",
                to_string(dx.shape()));
  const std::int64_t images = dx.dim(0), pixels = dx.dim(1) * dx.dim(2), channels = dx.dim(3);
  MDTRAIN_CHECK(dy.numel() == images * channels, std::invalid_argument, "[global_avg_pool2d_backward] dy ",
                to_string(dy.shape()), " does not hold ", images, " x ", channels, " gradients");
  if (!dy.device().is_cpu()) return cuda::global_avg_pool2d_backward(dy, images, pixels, channels, dx);
  dispatch_floating(dy.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::global_avg_pool2d_backward<T>(dy.data<T>(), images, pixels, channels, dx.data<T>());
  });
}

void global_max_pool2d(const Tensor& x, Tensor& y, Tensor& argmax) {
  require_float("global_max_pool2d", x, "x");
  require_same_dtype("global_max_pool2d", x, y, "y");
  MDTRAIN_CHECK(x.ndim() == 4 && x.dim(1) > 0 && x.dim(2) > 0, std::invalid_argument,
                "[global_max_pool2d] x must be (images, height, width, channels) with a non-empty image, got ",
                to_string(x.shape()));
  const std::int64_t images = x.dim(0), pixels = x.dim(1) * x.dim(2), channels = x.dim(3);
  MDTRAIN_CHECK(y.numel() == images * channels, std::invalid_argument, "[global_max_pool2d] y ", to_string(y.shape()),
                " does not hold ", images, " x ", channels, " maxima");
  require_argmax("global_max_pool2d", argmax, y);
  MDTRAIN_CHECK(pixels <= INT32_MAX, std::invalid_argument, "[global_max_pool2d] an image of ", x.dim(1), "x", x.dim(2),
                " pixels exceeds the 32-bit argmax index");
  if (!x.device().is_cpu()) return cuda::global_max_pool2d(x, images, pixels, channels, y, argmax);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::global_max_pool2d<T>(x.data<T>(), images, pixels, channels, y.data<T>(), argmax.data<std::int32_t>());
  });
}

void global_max_pool2d_backward(const Tensor& dy, const Tensor& argmax, Tensor& dx) {
  require_float("global_max_pool2d_backward", dy, "dy");
  require_same_dtype("global_max_pool2d_backward", dy, dx, "dx");
  MDTRAIN_CHECK(dx.ndim() == 4 && dx.dim(1) > 0 && dx.dim(2) > 0, std::invalid_argument,
                "[global_max_pool2d_backward] dx must be (images, height, width, channels), got ",
                to_string(dx.shape()));
  const std::int64_t images = dx.dim(0), pixels = dx.dim(1) * dx.dim(2), channels = dx.dim(3);
  MDTRAIN_CHECK(dy.numel() == images * channels, std::invalid_argument, "[global_max_pool2d_backward] dy ",
                to_string(dy.shape()), " does not hold ", images, " x ", channels, " gradients");
  require_argmax("global_max_pool2d_backward", argmax, dy);
  if (!dy.device().is_cpu()) return cuda::global_max_pool2d_backward(dy, argmax, images, pixels, channels, dx);
  dispatch_floating(dy.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::global_max_pool2d_backward<T>(dy.data<T>(), argmax.data<std::int32_t>(), images, pixels, channels,
                                       dx.data<T>());
  });
}

namespace {
// Below this many multiply-adds a convolution pass is too short to share: waking the team's
// workers and adding the partial gradients would cost more than the second core gives.
constexpr std::int64_t kMinSplitMacs = std::int64_t{2} << 20;
}  // namespace

int conv2d_image_runs(const Device& device, std::int64_t images, std::int64_t macs,
                      const std::function<void(int runs)>& prepare,
                      const std::function<void(int run, std::int64_t first_image, std::int64_t last_image)>& pass) {
  const int wanted = device.is_cpu() && images >= 2 && macs >= kMinSplitMacs
                         ? static_cast<int>(std::min<std::int64_t>(images, cpu_thread_count()))
                         : 1;
  cpu::IntraOpTeam team(wanted > 1);
  const int runs = team.get() ? std::min(wanted, team.get()->size()) : 1;
  prepare(runs);
  if (runs == 1) {
    pass(0, 0, images);
  } else {
    team.get()->run([&](int r) {
      if (r < runs) pass(r, images * r / runs, images * (r + 1) / runs);
    });
  }
  return runs;
}

}  // namespace mdtrain::ops
