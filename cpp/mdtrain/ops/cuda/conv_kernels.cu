// CUDA kernels behind ops/conv_ops.h (see conv_kernels.h): one thread per output element, the
// index math of ops/conv_math.h that ops/cpu/conv_kernels.cpp calls, the CPU's operations in the
// CPU's order. ops/cuda/kernel_list.h lists the kernels, their shared functions and GPU tests.
// Arguments were validated by conv_ops.cpp.
#include <climits>
#include <cstdint>
#include <initializer_list>

#include "mdtrain/ops/conv_math.h"
#include "mdtrain/core/cuda/check.h"
#include "mdtrain/ops/cuda/conv_kernels.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;
using detail::OnDevice;

namespace {

// Kernels are templated on the index type I: std::int32_t when every offset of the call fits,
// which is nearly always (integer division, which the flat index decomposes with, is several times
// cheaper in 32 bits on a GPU), else std::int64_t. The margin keeps i + grid stride from
// overflowing (blocks_for caps the grid at 4096 blocks).
constexpr std::int64_t kInt32Limit = INT32_MAX - 4096 * static_cast<std::int64_t>(kThreads);

bool fits_int32(std::initializer_list<std::int64_t> sizes) {
  for (std::int64_t s : sizes)
    if (s > kInt32Limit) return false;
  return true;
}

// The geometry in the kernel's index type (Window2D holds int64).
template <class I>
struct Geometry {
  I in_h, in_w, channels, k_h, k_w, stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left, out_h, out_w;
  explicit Geometry(const Window2D& g)
      : in_h(static_cast<I>(g.in_h)),
        in_w(static_cast<I>(g.in_w)),
        channels(static_cast<I>(g.channels)),
        k_h(static_cast<I>(g.k_h)),
        k_w(static_cast<I>(g.k_w)),
        stride_h(static_cast<I>(g.stride_h)),
        stride_w(static_cast<I>(g.stride_w)),
        dilation_h(static_cast<I>(g.dilation_h)),
        dilation_w(static_cast<I>(g.dilation_w)),
        pad_top(static_cast<I>(g.pad_top)),
        pad_left(static_cast<I>(g.pad_left)),
        out_h(static_cast<I>(g.out_h)),
        out_w(static_cast<I>(g.out_w)) {}
};

// The in-bounds taps [lo, hi) of output row oh / column ow's window and its first input coordinate.
struct Taps {
  std::int64_t start, lo, hi;
};
template <class I>
__device__ inline Taps rows_of(const Geometry<I>& g, I oh) {
  Taps t;
  t.start = math::window_start(oh, g.stride_h, g.pad_top);
  math::taps_in_bounds(t.start, g.k_h, g.dilation_h, g.in_h, t.lo, t.hi);
  return t;
}
template <class I>
__device__ inline Taps cols_of(const Geometry<I>& g, I ow) {
  Taps t;
  t.start = math::window_start(ow, g.stride_w, g.pad_left);
  math::taps_in_bounds(t.start, g.k_w, g.dilation_w, g.in_w, t.lo, t.hi);
  return t;
}

// col[i] for i < n: the column entries of output rows from first_row on (numbered across the
// batch); entry (kh, kw, c) of position (r, ow) is x at the tap's input pixel, 0 in the padding.
template <class T, class I>
__global__ void im2col_kernel(const T* x, Geometry<I> g, I first_row, I n, T* col) {
  const I C = g.channels, row_len = g.k_w * C, patch = g.k_h * row_len;
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) {
    const I p = i / patch, j = i - p * patch;
    const I kh = j / row_len, kw = (j - kh * row_len) / C, c = j - kh * row_len - kw * C;
    const I q = p / g.out_w, ow = p - q * g.out_w, r = first_row + q;
    const I b = r / g.out_h, oh = r - b * g.out_h;
    const Taps h = rows_of(g, oh), w = cols_of(g, ow);
    T v = T(0);
    if (kh >= h.lo && kh < h.hi && kw >= w.lo && kw < w.hi) {
      const I ih = static_cast<I>(h.start) + kh * g.dilation_h, iw = static_cast<I>(w.start) + kw * g.dilation_w;
      v = x[((b * g.in_h + ih) * g.in_w + iw) * C + c];
    }
    col[i] = v;
  }
}

// dx[i] for the n elements of images [first_image, ...) (dx points at first_image): the sum, in
// output order, of the column entries of rows [first_row, first_row + rows) that read the element,
// added onto dx (accumulate) or onto 0.
template <class T, class I>
__global__ void col2im_kernel(const T* col, Geometry<I> g, I first_row, I rows, I first_image, I n, bool accumulate,
                              T* dx) {
  const I C = g.channels, row_len = g.k_w * C, patch = g.k_h * row_len;
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) {
    const I pixel = i / C, c = i - pixel * C;
    const I line = pixel / g.in_w, iw = pixel - line * g.in_w;
    const I image = line / g.in_h, ih = line - image * g.in_h, b = first_image + image;
    T acc = accumulate ? dx[i] : T(0);
    for (I kh = g.k_h - 1; kh >= 0; --kh) {
      const auto oh = static_cast<I>(math::window_output_at(ih, kh, g.stride_h, g.dilation_h, g.pad_top, g.out_h));
      if (oh < 0) continue;
      const I r = b * g.out_h + oh - first_row;  // the row within col
      if (r < 0 || r >= rows) continue;
      for (I kw = g.k_w - 1; kw >= 0; --kw) {
        const auto ow = static_cast<I>(math::window_output_at(iw, kw, g.stride_w, g.dilation_w, g.pad_left, g.out_w));
        if (ow >= 0) acc += col[(r * g.out_w + ow) * patch + kh * row_len + kw * C + c];
      }
    }
    dx[i] = acc;
  }
}

// y[i], argmax[i] for output element i = ((b, oh, ow), c): the CPU's scan of the window's in-bounds
// elements in row-major order from its first one, replacing the best only when
// math::max_pool_takes (a larger value or a first NaN): ties stay with the first element, a NaN
// wins, the padding never does.
template <class T, class I>
__global__ void max_pool2d_kernel(const T* x, Geometry<I> g, I n, T* y, std::int32_t* argmax) {
  const I C = g.channels;
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) {
    const I o = i / C, c = i - o * C;
    const I q = o / g.out_w, ow = o - q * g.out_w, b = q / g.out_h, oh = q - b * g.out_h;
    const Taps h = rows_of(g, oh), w = cols_of(g, ow);
    if (h.lo >= h.hi || w.lo >= w.hi) {  // a window wholly in the padding (impossible with TF's padding)
      y[i] = T(0);
      argmax[i] = -1;
      continue;
    }
    const T* img = x + b * g.in_h * g.in_w * C + c;
    const auto offset = [&](std::int64_t kh, std::int64_t kw) {
      return static_cast<std::int32_t>((h.start + kh * g.dilation_h) * g.in_w + w.start + kw * g.dilation_w);
    };
    std::int32_t best_at = offset(h.lo, w.lo);
    T best = img[static_cast<I>(best_at) * C];
    for (std::int64_t kh = h.lo; kh < h.hi; ++kh)
      for (std::int64_t kw = w.lo; kw < w.hi; ++kw) {
        const std::int32_t at = offset(kh, kw);
        const T v = img[static_cast<I>(at) * C];
        if (math::max_pool_takes(v, best)) {
          best = v;
          best_at = at;
        }
      }
    y[i] = best;
    argmax[i] = best_at;
  }
}

// dx[i] for input element i = ((b, ih, iw), c): the sum, in output order, of dy over the windows
// that read the element and chose it (argmax).
template <class T, class I>
__global__ void max_pool2d_backward_kernel(const T* dy, const std::int32_t* argmax, Geometry<I> g, I n, T* dx) {
  const I C = g.channels;
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) {
    const I pixel = i / C, c = i - pixel * C;
    const I line = pixel / g.in_w, iw = pixel - line * g.in_w, b = line / g.in_h, ih = line - b * g.in_h;
    const auto at = static_cast<std::int32_t>(ih * g.in_w + iw);
    T acc = T(0);
    for (I kh = g.k_h - 1; kh >= 0; --kh) {
      const auto oh = static_cast<I>(math::window_output_at(ih, kh, g.stride_h, g.dilation_h, g.pad_top, g.out_h));
      if (oh < 0) continue;
      for (I kw = g.k_w - 1; kw >= 0; --kw) {
        const auto ow = static_cast<I>(math::window_output_at(iw, kw, g.stride_w, g.dilation_w, g.pad_left, g.out_w));
        if (ow < 0) continue;
        const I o = ((b * g.out_h + oh) * g.out_w + ow) * C + c;
        if (argmax[o] == at) acc += dy[o];
      }
    }
    dx[i] = acc;
  }
}

// y[i] for output element i: the in-bounds elements added in row-major window order, divided by
// their count (0 for a window wholly in the padding).
template <class T, class I>
__global__ void avg_pool2d_kernel(const T* x, Geometry<I> g, I n, T* y) {
  const I C = g.channels;
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) {
    const I o = i / C, c = i - o * C;
    const I q = o / g.out_w, ow = o - q * g.out_w, b = q / g.out_h, oh = q - b * g.out_h;
    const Taps h = rows_of(g, oh), w = cols_of(g, ow);
    const T* img = x + b * g.in_h * g.in_w * C + c;
    T acc = T(0);
    for (std::int64_t kh = h.lo; kh < h.hi; ++kh)
      for (std::int64_t kw = w.lo; kw < w.hi; ++kw)
        acc += img[static_cast<I>((h.start + kh * g.dilation_h) * g.in_w + w.start + kw * g.dilation_w) * C];
    const std::int64_t count = math::window_count(h.lo, h.hi, w.lo, w.hi);
    y[i] = count > 0 ? acc / static_cast<T>(count) : acc;
  }
}

// dx[i] for input element i: the sum, in output order, of dy / count over the windows that read it.
template <class T, class I>
__global__ void avg_pool2d_backward_kernel(const T* dy, Geometry<I> g, I n, T* dx) {
  const I C = g.channels;
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) {
    const I pixel = i / C, c = i - pixel * C;
    const I line = pixel / g.in_w, iw = pixel - line * g.in_w, b = line / g.in_h, ih = line - b * g.in_h;
    T acc = T(0);
    for (I kh = g.k_h - 1; kh >= 0; --kh) {
      const auto oh = static_cast<I>(math::window_output_at(ih, kh, g.stride_h, g.dilation_h, g.pad_top, g.out_h));
      if (oh < 0) continue;
      const Taps h = rows_of(g, oh);
      for (I kw = g.k_w - 1; kw >= 0; --kw) {
        const auto ow = static_cast<I>(math::window_output_at(iw, kw, g.stride_w, g.dilation_w, g.pad_left, g.out_w));
        if (ow < 0) continue;
        const Taps w = cols_of(g, ow);
        // Not 0: this window reads (ih, iw).
        const T count = static_cast<T>(math::window_count(h.lo, h.hi, w.lo, w.hi));
        acc += dy[((b * g.out_h + oh) * g.out_w + ow) * C + c] / count;
      }
    }
    dx[i] = acc;
  }
}

// y[i] for i = (b, c): the image's pixels added in pixel order, divided by their number.
template <class T, class I>
__global__ void global_avg_pool2d_kernel(const T* x, I pixels, I channels, I n, T* y) {
  const T count = static_cast<T>(pixels);
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) {
    const I b = i / channels, c = i - b * channels;
    const T* img = x + b * pixels * channels + c;
    T acc = T(0);
    for (I p = 0; p < pixels; ++p) acc += img[p * channels];
    y[i] = acc / count;
  }
}

// dx[i] for i = ((b, pixel), c): dy[b, c] / pixels.
template <class T, class I>
__global__ void global_avg_pool2d_backward_kernel(const T* dy, I pixels, I channels, I n, T* dx) {
  const T count = static_cast<T>(pixels);
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) {
    const I c = i % channels, b = i / (pixels * channels);
    dx[i] = dy[b * channels + c] / count;
  }
}

// y[i], argmax[i] for i = (b, c): the winning pixel by math::global_max_index (pixel order, as
// the CPU loop scans).
template <class T, class I>
__global__ void global_max_pool2d_kernel(const T* x, I pixels, I channels, I n, T* y, std::int32_t* argmax) {
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) {
    const I b = i / channels, c = i - b * channels;
    const T* img = x + b * pixels * channels + c;
    const auto best = static_cast<I>(
        math::global_max_index(img, static_cast<std::int64_t>(pixels), static_cast<std::int64_t>(channels)));
    y[i] = img[best * channels];
    argmax[i] = static_cast<std::int32_t>(best);
  }
}

// dx[i] for i = ((b, pixel), c): dy[b, c] at the winning pixel, 0 elsewhere.
template <class T, class I>
__global__ void global_max_pool2d_backward_kernel(const T* dy, const std::int32_t* argmax, I pixels, I channels, I n,
                                                  T* dx) {
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) {
    const I c = i % channels, pixel = (i / channels) % pixels, b = i / (pixels * channels);
    dx[i] = math::global_max_grad_at(dy[b * channels + c], static_cast<std::int64_t>(pixel),
                                     static_cast<std::int64_t>(argmax[b * channels + c]));
  }
}

// f(T{}, I{}) for the tensor's float type and the index type.
template <class F>
void by_types(DType dtype, bool small, F&& f) {
  if (dtype == DType::Float32) {
    if (small) f(float{}, std::int32_t{});
    else f(float{}, std::int64_t{});
  } else {
    if (small) f(double{}, std::int32_t{});
    else f(double{}, std::int64_t{});
  }
}

}  // namespace

void im2col(const Tensor& x, const Window2D& g, std::int64_t first_row, Tensor& col) {
  const std::int64_t n = col.numel();
  if (n == 0) return;
  OnDevice on(x);
  by_types(x.dtype(), fits_int32({n, x.numel(), first_row + col.dim(0) / g.out_w}), [&](auto t, auto index) {
    using T = decltype(t);
    using I = decltype(index);
    im2col_kernel<T, I><<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), Geometry<I>(g),
                                                                   static_cast<I>(first_row), static_cast<I>(n),
                                                                   col.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("im2col_kernel");
}

void col2im(const Tensor& col, const Window2D& g, std::int64_t first_row, bool accumulate, Tensor& dx) {
  const std::int64_t rows = col.dim(0) / g.out_w;  // output rows (of one image each) in col
  const std::int64_t images = dx.dim(0);
  if (images == 0) return;
  // The images whose rows col holds (all of them when overwriting): elements of other images get
  // nothing to add.
  const std::int64_t first_image = accumulate ? first_row / g.out_h : 0;
  const std::int64_t end_image = accumulate ? (rows == 0 ? first_image : (first_row + rows - 1) / g.out_h + 1) : images;
  const std::int64_t image_len = g.in_h * g.in_w * g.channels, n = (end_image - first_image) * image_len;
  if (n == 0) return;
  OnDevice on(dx);
  by_types(dx.dtype(), fits_int32({col.numel(), dx.numel(), images * g.out_h}), [&](auto t, auto index) {
    using T = decltype(t);
    using I = decltype(index);
    col2im_kernel<T, I><<<blocks_for(n), kThreads, 0, on.stream>>>(col.data<T>(), Geometry<I>(g),
                                                                   static_cast<I>(first_row), static_cast<I>(rows),
                                                                   static_cast<I>(first_image), static_cast<I>(n),
                                                                   accumulate, dx.data<T>() + first_image * image_len);
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("col2im_kernel");
}

void max_pool2d(const Tensor& x, const Window2D& g, Tensor& y, Tensor& argmax) {
  const std::int64_t n = y.numel();
  if (n == 0) return;
  OnDevice on(x);
  by_types(x.dtype(), fits_int32({n, x.numel()}), [&](auto t, auto index) {
    using T = decltype(t);
    using I = decltype(index);
    max_pool2d_kernel<T, I><<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), Geometry<I>(g), static_cast<I>(n),
                                                                       y.data<T>(), argmax.data<std::int32_t>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("max_pool2d_kernel");
}

void max_pool2d_backward(const Tensor& dy, const Tensor& argmax, const Window2D& g, Tensor& dx) {
  const std::int64_t n = dx.numel();
  if (n == 0) return;
  OnDevice on(dx);
  by_types(dx.dtype(), fits_int32({n, dy.numel()}), [&](auto t, auto index) {
    using T = decltype(t);
    using I = decltype(index);
    max_pool2d_backward_kernel<T, I>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(dy.data<T>(), argmax.data<std::int32_t>(), Geometry<I>(g),
                                                    static_cast<I>(n), dx.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("max_pool2d_backward_kernel");
}

void avg_pool2d(const Tensor& x, const Window2D& g, Tensor& y) {
  const std::int64_t n = y.numel();
  if (n == 0) return;
  OnDevice on(x);
  by_types(x.dtype(), fits_int32({n, x.numel()}), [&](auto t, auto index) {
    using T = decltype(t);
    using I = decltype(index);
    avg_pool2d_kernel<T, I>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), Geometry<I>(g), static_cast<I>(n), y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("avg_pool2d_kernel");
}

void avg_pool2d_backward(const Tensor& dy, const Window2D& g, Tensor& dx) {
  const std::int64_t n = dx.numel();
  if (n == 0) return;
  OnDevice on(dx);
  by_types(dx.dtype(), fits_int32({n, dy.numel()}), [&](auto t, auto index) {
    using T = decltype(t);
    using I = decltype(index);
    avg_pool2d_backward_kernel<T, I>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(dy.data<T>(), Geometry<I>(g), static_cast<I>(n), dx.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("avg_pool2d_backward_kernel");
}

void global_avg_pool2d(const Tensor& x, std::int64_t images, std::int64_t pixels, std::int64_t channels, Tensor& y) {
  const std::int64_t n = images * channels;
  if (n == 0) return;
  OnDevice on(x);
  by_types(x.dtype(), fits_int32({x.numel()}), [&](auto t, auto index) {
    using T = decltype(t);
    using I = decltype(index);
    global_avg_pool2d_kernel<T, I><<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), static_cast<I>(pixels),
                                                                              static_cast<I>(channels),
                                                                              static_cast<I>(n), y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("global_avg_pool2d_kernel");
}

void global_avg_pool2d_backward(const Tensor& dy, std::int64_t images, std::int64_t pixels, std::int64_t channels,
                                Tensor& dx) {
  const std::int64_t n = images * pixels * channels;
  if (n == 0) return;
  OnDevice on(dx);
  by_types(dx.dtype(), fits_int32({n}), [&](auto t, auto index) {
    using T = decltype(t);
    using I = decltype(index);
    global_avg_pool2d_backward_kernel<T, I>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(dy.data<T>(), static_cast<I>(pixels), static_cast<I>(channels),
                                                    static_cast<I>(n), dx.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("global_avg_pool2d_backward_kernel");
}

void global_max_pool2d(const Tensor& x, std::int64_t images, std::int64_t pixels, std::int64_t channels, Tensor& y,
                       Tensor& argmax) {
  const std::int64_t n = images * channels;
  if (n == 0) return;
  OnDevice on(x);
  by_types(x.dtype(), fits_int32({x.numel()}), [&](auto t, auto index) {
    using T = decltype(t);
    using I = decltype(index);
    global_max_pool2d_kernel<T, I>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), static_cast<I>(pixels), static_cast<I>(channels),
                                                    static_cast<I>(n), y.data<T>(), argmax.data<std::int32_t>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("global_max_pool2d_kernel");
}

void global_max_pool2d_backward(const Tensor& dy, const Tensor& argmax, std::int64_t images, std::int64_t pixels,
                                std::int64_t channels, Tensor& dx) {
  const std::int64_t n = images * pixels * channels;
  if (n == 0) return;
  OnDevice on(dx);
  by_types(dx.dtype(), fits_int32({n}), [&](auto t, auto index) {
    using T = decltype(t);
    using I = decltype(index);
    global_max_pool2d_backward_kernel<T, I>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(dy.data<T>(), argmax.data<std::int32_t>(), static_cast<I>(pixels),
                                                    static_cast<I>(channels), static_cast<I>(n), dx.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("global_max_pool2d_backward_kernel");
}

}  // namespace mdtrain::cuda
