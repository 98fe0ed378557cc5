#pragma once
// The per-element math of ops::resize_bilinear (ops/resize_bilinear.h), shared by its CPU loops
// and its CUDA kernels: TF's bilinear resize with half-pixel centers (what Keras 3's
// UpSampling2D(interpolation="bilinear") runs on TF), and its adjoint as a gather so that every
// input element's gradient is one thread's sum in one order.
#include <cstdint>

#include "mdtrain/core/hd.h"

namespace mdtrain::math {

// Images (batch, h, w, c) resized to (batch, out_h, out_w, c) by whole factors out_h / h, out_w / w.
template <class T>
struct ResizeDims {
  std::int64_t batch, h, w, c, out_h, out_w;
  T scale_h, scale_w;  // h / out_h and w / out_w, as TF computes them in T
};

// The two source rows (or columns) that output index o reads, and the weight of the second: TF's
// in = (o + 0.5) * scale - 0.5, lo = max(floor(in), 0), hi = min(floor(in) + 1, n - 1),
// a = in - floor(in) (an integer in reads lo alone: a = 0).
template <class T>
MDTRAIN_HD void bilinear_tap(std::int64_t o, std::int64_t n, T scale, std::int64_t& lo, std::int64_t& hi, T& a) {
  const T in = (static_cast<T>(o) + T(0.5)) * scale - T(0.5);
  std::int64_t f = static_cast<std::int64_t>(in);
  if (static_cast<T>(f) > in) --f;  // floor, also below 0
  a = in - static_cast<T>(f);
  lo = f < 0 ? 0 : f;
  hi = f + 1 > n - 1 ? n - 1 : f + 1;
}

// The weight of source index i in output index o (0 unless i is one of o's two taps).
template <class T>
MDTRAIN_HD T bilinear_weight(std::int64_t o, std::int64_t i, std::int64_t n, T scale) {
  std::int64_t lo, hi;
  T a;
  bilinear_tap(o, n, scale, lo, hi, a);
  return (lo == i ? T(1) - a : T(0)) + (hi == i ? a : T(0));
}

// Output element k of the flattened (batch, out_h, out_w, c), with TF's order of operations:
// the two rows blended along the width, then those along the height.
template <class T>
MDTRAIN_HD T resize_bilinear_element(const T* x, std::int64_t k, const ResizeDims<T>& d) {
  const std::int64_t ch = k % d.c, ow = (k / d.c) % d.out_w, oh = (k / (d.c * d.out_w)) % d.out_h;
  const std::int64_t b = k / (d.c * d.out_w * d.out_h);
  std::int64_t y0, y1, x0, x1;
  T ya, xa;
  bilinear_tap(oh, d.h, d.scale_h, y0, y1, ya);
  bilinear_tap(ow, d.w, d.scale_w, x0, x1, xa);
  const T* image = x + b * d.h * d.w * d.c + ch;
  const T tl = image[(y0 * d.w + x0) * d.c], tr = image[(y0 * d.w + x1) * d.c];
  const T bl = image[(y1 * d.w + x0) * d.c], br = image[(y1 * d.w + x1) * d.c];
  const T top = tl + (tr - tl) * xa, bottom = bl + (br - bl) * xa;
  return top + (bottom - top) * ya;
}

// Input gradient element k of the flattened (batch, h, w, c): the sum over the outputs that read
// it (rows [(i - 1) f, (i + 2) f) hold all of them for a whole factor f), row by row.
template <class T>
MDTRAIN_HD T resize_bilinear_backward_element(const T* dy, std::int64_t k, const ResizeDims<T>& d) {
  const std::int64_t ch = k % d.c, j = (k / d.c) % d.w, i = (k / (d.c * d.w)) % d.h, b = k / (d.c * d.w * d.h);
  const std::int64_t fh = d.out_h / d.h, fw = d.out_w / d.w;
  const std::int64_t oh0 = (i - 1) * fh < 0 ? 0 : (i - 1) * fh, oh1 = (i + 2) * fh > d.out_h ? d.out_h : (i + 2) * fh;
  const std::int64_t ow0 = (j - 1) * fw < 0 ? 0 : (j - 1) * fw, ow1 = (j + 2) * fw > d.out_w ? d.out_w : (j + 2) * fw;
  const T* image = dy + b * d.out_h * d.out_w * d.c + ch;
  T sum = T(0);
  for (std::int64_t oh = oh0; oh < oh1; ++oh) {
    const T wy = bilinear_weight(oh, i, d.h, d.scale_h);
    if (wy == T(0)) continue;
    for (std::int64_t ow = ow0; ow < ow1; ++ow) {
      const T wx = bilinear_weight(ow, j, d.w, d.scale_w);
      if (wx != T(0)) sum = sum + wy * wx * image[(oh * d.out_w + ow) * d.c];
    }
  }
  return sum;
}

}  // namespace mdtrain::math
