#include "mdtrain/ops/cpu/conv_kernels.h"

#include <algorithm>
#include <type_traits>

namespace mdtrain::cpu {

namespace {

// Short runs (a kernel row of a 1-channel image is 3 or 5 elements) are the common case, so
// these are plain loops the compiler vectorises rather than memcpy calls.
template <class T>
inline void copy_run(const T* src, std::int64_t n, T* dst) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i];
}
template <class T>
inline void add_run(const T* src, std::int64_t n, T* dst) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] += src[i];
}
template <class T>
inline void zero_run(std::int64_t n, T* dst) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = T(0);
}

// Walks the output positions of output rows [first_row, first_row + rows) (numbered across the
// batch) in column order and calls visit(patch, image_line, hs, kh_lo, kh_hi, ws, kw_lo, kw_hi):
// `patch` is the offset of the position's k_h * k_w * C column entries, image_line the image's
// first input row (b * in_h), hs and ws the input coordinates of tap (0, 0), and
// [kh_lo, kh_hi) x [kw_lo, kw_hi) the in-bounds taps. im2col and col2im both walk it, so the two
// stay each other's adjoint by construction.
template <class Visit>
void for_each_patch(const Window2D& g, std::int64_t first_row, std::int64_t rows, Visit&& visit) {
  const std::int64_t patch_len = g.k_h * g.k_w * g.channels;
  std::int64_t patch = 0;
  for (std::int64_t r = first_row; r < first_row + rows; ++r) {
    const std::int64_t b = r / g.out_h, oh = r - b * g.out_h;
    const std::int64_t hs = math::window_start(oh, g.stride_h, g.pad_top);
    std::int64_t kh_lo, kh_hi;
    math::taps_in_bounds(hs, g.k_h, g.dilation_h, g.in_h, kh_lo, kh_hi);
    for (std::int64_t ow = 0; ow < g.out_w; ++ow, patch += patch_len) {
      const std::int64_t ws = math::window_start(ow, g.stride_w, g.pad_left);
      std::int64_t kw_lo, kw_hi;
      math::taps_in_bounds(ws, g.k_w, g.dilation_w, g.in_w, kw_lo, kw_hi);
      visit(patch, b * g.in_h, hs, kh_lo, kh_hi, ws, kw_lo, kw_hi);
    }
  }
}

// RowLen > 0 is k_w * C known at compile time (dilation_w == 1): the short kernel rows of images
// with few channels (3 elements for a 3x3 kernel on one channel) are then copied by unrolled code
// instead of a loop whose setup costs more than its work. 0: any length, taken from g.
template <class T, int RowLen>
void im2col_rows(const T* x, std::int64_t first_row, std::int64_t rows, const Window2D& g, T* col) {
  const std::int64_t C = g.channels, row_len = RowLen > 0 ? RowLen : g.k_w * C, line = g.in_w * C;
  const auto visit = [&](std::int64_t patch, std::int64_t image_line, std::int64_t hs, std::int64_t kh_lo,
                         std::int64_t kh_hi, std::int64_t ws, std::int64_t kw_lo, std::int64_t kw_hi) {
    for (std::int64_t kh = 0; kh < g.k_h; ++kh) {
      T* dst = col + patch + kh * row_len;
      if (kh < kh_lo || kh >= kh_hi) {
        zero_run(row_len, dst);
        continue;
      }
      const T* src = x + (image_line + hs + kh * g.dilation_h) * line;
      if (g.dilation_w == 1) {
        // The taps of one kernel row are adjacent pixels: one contiguous run.
        if (kw_lo == 0 && kw_hi == g.k_w) {
          copy_run(src + ws * C, row_len, dst);
          continue;
        }
        zero_run(kw_lo * C, dst);
        copy_run(src + (ws + kw_lo) * C, (kw_hi - kw_lo) * C, dst + kw_lo * C);
      } else {
        zero_run(kw_lo * C, dst);
        for (std::int64_t kw = kw_lo; kw < kw_hi; ++kw) copy_run(src + (ws + kw * g.dilation_w) * C, C, dst + kw * C);
      }
      zero_run((g.k_w - kw_hi) * C, dst + kw_hi * C);
    }
  };
  for_each_patch(g, first_row, rows, visit);
}

template <class T, int RowLen>
void col2im_rows(const T* col, std::int64_t first_row, std::int64_t rows, const Window2D& g, T* dx) {
  const std::int64_t C = g.channels, row_len = RowLen > 0 ? RowLen : g.k_w * C, line = g.in_w * C;
  const auto visit = [&](std::int64_t patch, std::int64_t image_line, std::int64_t hs, std::int64_t kh_lo,
                         std::int64_t kh_hi, std::int64_t ws, std::int64_t kw_lo, std::int64_t kw_hi) {
    for (std::int64_t kh = kh_lo; kh < kh_hi; ++kh) {
      const T* src = col + patch + kh * row_len;
      T* dst = dx + (image_line + hs + kh * g.dilation_h) * line;
      if (g.dilation_w != 1) {
        for (std::int64_t kw = kw_lo; kw < kw_hi; ++kw) add_run(src + kw * C, C, dst + (ws + kw * g.dilation_w) * C);
      } else if (kw_lo == 0 && kw_hi == g.k_w) {
        add_run(src, row_len, dst + ws * C);
      } else {
        add_run(src + kw_lo * C, (kw_hi - kw_lo) * C, dst + (ws + kw_lo) * C);
      }
    }
  };
  for_each_patch(g, first_row, rows, visit);
}

// Calls f(std::integral_constant<int, n>) with n the kernel-row length k_w * C when it is one of
// the short ones worth unrolling, else with n = 0.
template <class F>
void with_row_length(const Window2D& g, F&& f) {
  switch (g.dilation_w == 1 ? g.k_w * g.channels : 0) {
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    case 9: return f(std::integral_constant<int, 9>{});
    case 15: return f(std::integral_constant<int, 15>{});
    default: return f(std::integral_constant<int, 0>{});
  }
}

}  // namespace

template <class T>
void im2col(const T* x, std::int64_t first_row, std::int64_t rows, const Window2D& g, T* col) {
  with_row_length(g, [&](auto n) { im2col_rows<T, decltype(n)::value>(x, first_row, rows, g, col); });
}

template <class T>
void col2im_accumulate(const T* col, std::int64_t first_row, std::int64_t rows, const Window2D& g, T* dx) {
  with_row_length(g, [&](auto n) { col2im_rows<T, decltype(n)::value>(col, first_row, rows, g, dx); });
}

namespace {

// Walks every output position of a pooling window and calls visit(out, image, h_lo, h_hi, hs,
// w_lo, w_hi, ws) where `out` is the output position's index (b * out_h + oh) * out_w + ow and
// `image` the batch index; the in-bounds window is rows [hs + h_lo, hs + h_hi) and columns
// [ws + w_lo, ws + w_hi).
template <class Visit>
void for_each_window(const Window2D& g, std::int64_t images, Visit&& visit) {
  std::int64_t out = 0;
  for (std::int64_t b = 0; b < images; ++b)
    for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
      const std::int64_t hs = math::window_start(oh, g.stride_h, g.pad_top);
      std::int64_t h_lo, h_hi;
      math::taps_in_bounds(hs, g.k_h, g.dilation_h, g.in_h, h_lo, h_hi);
      for (std::int64_t ow = 0; ow < g.out_w; ++ow, ++out) {
        const std::int64_t ws = math::window_start(ow, g.stride_w, g.pad_left);
        std::int64_t w_lo, w_hi;
        math::taps_in_bounds(ws, g.k_w, g.dilation_w, g.in_w, w_lo, w_hi);
        visit(out, b, hs, h_lo, h_hi, ws, w_lo, w_hi);
      }
    }
}

// Calls visit(oh, ow) for every window that reads input pixel (ih, iw), in output order (oh, then
// ow, increasing): the backward passes gather each input element's gradient in the order a
// scatter over the outputs would add it, with the index math the CUDA kernels use (they cannot
// scatter without races).
template <class Visit>
void for_each_window_reading(const Window2D& g, std::int64_t ih, std::int64_t iw, Visit&& visit) {
  for (std::int64_t kh = g.k_h - 1; kh >= 0; --kh) {
    const std::int64_t oh = math::window_output_at(ih, kh, g.stride_h, g.dilation_h, g.pad_top, g.out_h);
    if (oh < 0) continue;
    for (std::int64_t kw = g.k_w - 1; kw >= 0; --kw) {
      const std::int64_t ow = math::window_output_at(iw, kw, g.stride_w, g.dilation_w, g.pad_left, g.out_w);
      if (ow >= 0) visit(oh, ow);
    }
  }
}

}  // namespace

template <class T>
void max_pool2d(const T* x, std::int64_t images, const Window2D& g, T* y, std::int32_t* argmax) {
  const std::int64_t C = g.channels, image_len = g.in_h * g.in_w * C;
  const auto visit = [&](std::int64_t out, std::int64_t b, std::int64_t hs, std::int64_t h_lo, std::int64_t h_hi,
                         std::int64_t ws, std::int64_t w_lo, std::int64_t w_hi) {
    T* yp = y + out * C;
    std::int32_t* ap = argmax + out * C;
    if (h_lo >= h_hi || w_lo >= w_hi) {  // a window wholly in the padding (impossible with TF's padding)
      zero_run(C, yp);
      for (std::int64_t c = 0; c < C; ++c) ap[c] = -1;
      return;
    }
    const T* img = x + b * image_len;
    const auto offset = [&](std::int64_t kh, std::int64_t kw) {
      return static_cast<std::int32_t>((hs + kh * g.dilation_h) * g.in_w + ws + kw * g.dilation_w);
    };
    // Start from the first in-bounds element; comparing it with itself again changes nothing.
    const std::int32_t first = offset(h_lo, w_lo);
    copy_run(img + static_cast<std::int64_t>(first) * C, C, yp);
    for (std::int64_t c = 0; c < C; ++c) ap[c] = first;
    for (std::int64_t kh = h_lo; kh < h_hi; ++kh)
      for (std::int64_t kw = w_lo; kw < w_hi; ++kw) {
        const std::int32_t at = offset(kh, kw);
        const T* xp = img + static_cast<std::int64_t>(at) * C;
        // Selects rather than branches, so the channel loop vectorises.
        for (std::int64_t c = 0; c < C; ++c) {
          const T v = xp[c];
          const bool take = math::max_pool_takes(v, yp[c]);
          yp[c] = take ? v : yp[c];
          ap[c] = take ? at : ap[c];
        }
      }
  };
  for_each_window(g, images, visit);
}

template <class T>
void max_pool2d_backward(const T* dy, const std::int32_t* argmax, std::int64_t images, const Window2D& g, T* dx) {
  const std::int64_t C = g.channels, image_len = g.in_h * g.in_w * C;
  if (g.stride_h == g.k_h && g.stride_w == g.k_w && g.dilation_h == 1 && g.dilation_w == 1) {
    // Windows that tile the image (the usual pool_size == strides): every element lies in at most
    // one window, so one pass writes each element once (its gradient or 0) instead of zeroing the
    // whole input gradient and then scattering into it. What no window covers is a band at the
    // bottom and the right (the padding sits before the first window, which starts inside it).
    const std::int64_t covered_h = std::min(g.in_h, g.out_h * g.stride_h - g.pad_top);
    const std::int64_t covered_w = std::min(g.in_w, g.out_w * g.stride_w - g.pad_left);
    const auto visit = [&](std::int64_t out, std::int64_t b, std::int64_t hs, std::int64_t h_lo, std::int64_t h_hi,
                           std::int64_t ws, std::int64_t w_lo, std::int64_t w_hi) {
      const T* dyp = dy + out * C;
      const std::int32_t* ap = argmax + out * C;
      T* img = dx + b * image_len;
      for (std::int64_t kh = h_lo; kh < h_hi; ++kh)
        for (std::int64_t kw = w_lo; kw < w_hi; ++kw) {
          const auto at = static_cast<std::int32_t>((hs + kh) * g.in_w + ws + kw);
          T* dxp = img + static_cast<std::int64_t>(at) * C;
          for (std::int64_t c = 0; c < C; ++c) dxp[c] = ap[c] == at ? dyp[c] : T(0);
        }
    };
    for_each_window(g, images, visit);
    for (std::int64_t b = 0; b < images; ++b) {
      T* img = dx + b * image_len;
      for (std::int64_t h = 0; h < covered_h; ++h)
        zero_run((g.in_w - covered_w) * C, img + (h * g.in_w + covered_w) * C);
      zero_run((g.in_h - covered_h) * g.in_w * C, img + covered_h * g.in_w * C);
    }
    return;
  }
  // Overlapping windows: each input element sums the gradients of the windows it won, in output
  // order (what a scatter through argmax would add, in the same order).
  for (std::int64_t b = 0; b < images; ++b)
    for (std::int64_t ih = 0; ih < g.in_h; ++ih)
      for (std::int64_t iw = 0; iw < g.in_w; ++iw) {
        T* dxp = dx + ((b * g.in_h + ih) * g.in_w + iw) * C;
        const auto at = static_cast<std::int32_t>(ih * g.in_w + iw);
        zero_run(C, dxp);
        for_each_window_reading(g, ih, iw, [&](std::int64_t oh, std::int64_t ow) {
          const std::int64_t out = ((b * g.out_h + oh) * g.out_w + ow) * C;
          for (std::int64_t c = 0; c < C; ++c)
            if (argmax[out + c] == at) dxp[c] += dy[out + c];
        });
      }
}

template <class T>
void avg_pool2d(const T* x, std::int64_t images, const Window2D& g, T* y) {
  const std::int64_t C = g.channels, image_len = g.in_h * g.in_w * C;
  const auto visit = [&](std::int64_t out, std::int64_t b, std::int64_t hs, std::int64_t h_lo, std::int64_t h_hi,
                         std::int64_t ws, std::int64_t w_lo, std::int64_t w_hi) {
    T* yp = y + out * C;
    const T* img = x + b * image_len;
    zero_run(C, yp);
    for (std::int64_t kh = h_lo; kh < h_hi; ++kh)
      for (std::int64_t kw = w_lo; kw < w_hi; ++kw)
        add_run(img + ((hs + kh * g.dilation_h) * g.in_w + ws + kw * g.dilation_w) * C, C, yp);
    const std::int64_t count = math::window_count(h_lo, h_hi, w_lo, w_hi);
    if (count > 0) {
      const T n = static_cast<T>(count);
      for (std::int64_t c = 0; c < C; ++c) yp[c] /= n;
    }
  };
  for_each_window(g, images, visit);
}

template <class T>
void avg_pool2d_backward(const T* dy, std::int64_t images, const Window2D& g, T* dx) {
  // A gather: each input element adds dy / count of every window that reads it, in output order.
  const std::int64_t C = g.channels;
  for (std::int64_t b = 0; b < images; ++b)
    for (std::int64_t ih = 0; ih < g.in_h; ++ih)
      for (std::int64_t iw = 0; iw < g.in_w; ++iw) {
        T* dxp = dx + ((b * g.in_h + ih) * g.in_w + iw) * C;
        zero_run(C, dxp);
        for_each_window_reading(g, ih, iw, [&](std::int64_t oh, std::int64_t ow) {
          std::int64_t h_lo, h_hi, w_lo, w_hi;
          math::taps_in_bounds(math::window_start(oh, g.stride_h, g.pad_top), g.k_h, g.dilation_h, g.in_h, h_lo, h_hi);
          math::taps_in_bounds(math::window_start(ow, g.stride_w, g.pad_left), g.k_w, g.dilation_w, g.in_w, w_lo, w_hi);
          // Not 0: this window reads (ih, iw).
          const T n = static_cast<T>(math::window_count(h_lo, h_hi, w_lo, w_hi));
          const T* dyp = dy + ((b * g.out_h + oh) * g.out_w + ow) * C;
          for (std::int64_t c = 0; c < C; ++c) dxp[c] += dyp[c] / n;
        });
      }
}

template <class T>
void global_avg_pool2d(const T* x, std::int64_t images, std::int64_t pixels, std::int64_t channels, T* y) {
  const T n = static_cast<T>(pixels);
  for (std::int64_t b = 0; b < images; ++b) {
    T* yp = y + b * channels;
    const T* img = x + b * pixels * channels;
    zero_run(channels, yp);
    for (std::int64_t p = 0; p < pixels; ++p) add_run(img + p * channels, channels, yp);
    for (std::int64_t c = 0; c < channels; ++c) yp[c] /= n;
  }
}

template <class T>
void global_avg_pool2d_backward(const T* dy, std::int64_t images, std::int64_t pixels, std::int64_t channels, T* dx) {
  const T n = static_cast<T>(pixels);
  for (std::int64_t b = 0; b < images; ++b) {
    const T* dyp = dy + b * channels;
    T* img = dx + b * pixels * channels;
    for (std::int64_t p = 0; p < pixels; ++p)
      for (std::int64_t c = 0; c < channels; ++c) img[p * channels + c] = dyp[c] / n;
  }
}

template <class T>
void global_max_pool2d(const T* x, std::int64_t images, std::int64_t pixels, std::int64_t channels, T* y,
                       std::int32_t* argmax) {
  for (std::int64_t b = 0; b < images; ++b)
    for (std::int64_t c = 0; c < channels; ++c) {
      const T* img = x + b * pixels * channels + c;
      const std::int64_t best = math::global_max_index(img, pixels, channels);
      y[b * channels + c] = img[best * channels];
      argmax[b * channels + c] = static_cast<std::int32_t>(best);
    }
}

template <class T>
void global_max_pool2d_backward(const T* dy, const std::int32_t* argmax, std::int64_t images, std::int64_t pixels,
                                std::int64_t channels, T* dx) {
  for (std::int64_t b = 0; b < images; ++b)
    for (std::int64_t p = 0; p < pixels; ++p)
      for (std::int64_t c = 0; c < channels; ++c)
        dx[(b * pixels + p) * channels + c] =
            math::global_max_grad_at(dy[b * channels + c], p, argmax[b * channels + c]);
}

#define MDTRAIN_INSTANTIATE(T)                                                                                         \
  template void im2col<T>(const T*, std::int64_t, std::int64_t, const Window2D&, T*);                                  \
  template void col2im_accumulate<T>(const T*, std::int64_t, std::int64_t, const Window2D&, T*);                       \
  template void max_pool2d<T>(const T*, std::int64_t, const Window2D&, T*, std::int32_t*);                             \
  template void max_pool2d_backward<T>(const T*, const std::int32_t*, std::int64_t, const Window2D&, T*);              \
  template void avg_pool2d<T>(const T*, std::int64_t, const Window2D&, T*);                                            \
  template void avg_pool2d_backward<T>(const T*, std::int64_t, const Window2D&, T*);                                   \
  template void global_avg_pool2d<T>(const T*, std::int64_t, std::int64_t, std::int64_t, T*);                          \
  template void global_avg_pool2d_backward<T>(const T*, std::int64_t, std::int64_t, std::int64_t, T*);                 \
  template void global_max_pool2d<T>(const T*, std::int64_t, std::int64_t, std::int64_t, T*, std::int32_t*);           \
  template void global_max_pool2d_backward<T>(const T*, const std::int32_t*, std::int64_t, std::int64_t, std::int64_t, \
                                              T*);
MDTRAIN_INSTANTIATE(float)
MDTRAIN_INSTANTIATE(double)
#undef MDTRAIN_INSTANTIATE

}  // namespace mdtrain::cpu
