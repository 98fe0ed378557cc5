#pragma once
// Index math of 2-D sliding windows (convolution and pooling) over NHWC images, shared by the CPU
// kernels (ops/cpu/conv_kernels.cpp) and the CUDA kernels (ops/cuda/conv_kernels.cu). Sizes and
// padding follow TensorFlow exactly:
//   valid: out = floor((in - ((k - 1) * d + 1)) / s) + 1
//   same:  out = ceil(in / s), pad_total = max((out - 1) * s + (k - 1) * d + 1 - in, 0),
//          pad_before = pad_total / 2 (the odd element of padding goes after: bottom/right).
#include <cstdint>

#include "mdtrain/core/hd.h"

namespace mdtrain {

// The geometry of one 2-D window operation on an image of in_h x in_w x channels (batch excluded).
// Output position (oh, ow) with kernel tap (kh, kw) reads input row oh*stride_h - pad_top + kh*dilation_h
// (and likewise for columns); positions outside [0, in) are the padding.
struct Window2D {
  std::int64_t in_h = 0, in_w = 0, channels = 0;
  std::int64_t k_h = 1, k_w = 1;
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t dilation_h = 1, dilation_w = 1;
  std::int64_t pad_top = 0, pad_left = 0;
  std::int64_t out_h = 0, out_w = 0;
};

namespace math {

// The extent of a dilated kernel: (k - 1) * d + 1.
MDTRAIN_HD std::int64_t dilated_extent(std::int64_t k, std::int64_t d) { return (k - 1) * d + 1; }

// Output length along one axis; 0 when a "valid" window does not fit.
MDTRAIN_HD std::int64_t window_out_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d, bool same) {
  if (same) return (in + s - 1) / s;
  const std::int64_t e = dilated_extent(k, d);
  return in >= e ? (in - e) / s + 1 : 0;
}

// Padding before the first element along one axis (0 for "valid").
MDTRAIN_HD std::int64_t window_pad_before(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d, bool same) {
  if (!same) return 0;
  const std::int64_t out = (in + s - 1) / s;
  const std::int64_t total = (out - 1) * s + dilated_extent(k, d) - in;
  return total > 0 ? total / 2 : 0;
}

// Input coordinate of the window starting at output o (tap 0), possibly negative.
MDTRAIN_HD std::int64_t window_start(std::int64_t o, std::int64_t s, std::int64_t pad) { return o * s - pad; }

// The taps [lo, hi) of a window starting at `start` whose input coordinate start + t*d lies in [0, in).
// hi <= lo means none (a window entirely in the padding).
// Runs once per output position, so the usual d == 1 avoids the two integer divisions (which
// would cost more than copying a 3x3 patch).
MDTRAIN_HD void taps_in_bounds(std::int64_t start, std::int64_t k, std::int64_t d, std::int64_t in, std::int64_t& lo,
                               std::int64_t& hi) {
  if (d == 1) {
    lo = start < 0 ? -start : 0;
    hi = in - start;
  } else {
    lo = start < 0 ? (-start + d - 1) / d : 0;
    hi = start < in ? (in - start + d - 1) / d : 0;
  }
  if (hi > k) hi = k;
  if (hi < lo) hi = lo;
}

// The inverse of window_start + tap * d: the output o whose window reads input coordinate `in_pos`
// with tap `tap` (o * s - pad + tap * d == in_pos), or -1 when none does (the stride skips in_pos
// for this tap, or o falls outside [0, out)). The backward passes are gathers over it: each input
// element visits the windows that read it, taps from last to first, which is increasing o, the
// order in which a scatter over the outputs would have added their contributions.
MDTRAIN_HD std::int64_t window_output_at(std::int64_t in_pos, std::int64_t tap, std::int64_t s, std::int64_t d,
                                         std::int64_t pad, std::int64_t out) {
  const std::int64_t t = in_pos + pad - tap * d;  // o * s
  if (t < 0) return -1;
  const std::int64_t o = s == 1 ? t : t / s;
  return o * s == t && o < out ? o : -1;
}

// Max pooling's comparison: a larger value wins, and a NaN wins over any number so that it
// reaches the loss instead of vanishing (as a NaN does through TF's max pool).
template <class T>
MDTRAIN_HD bool max_pool_takes(T candidate, T best) {
  return candidate > best || (candidate != candidate && best == best);
}

// Global max pooling of one channel: the pixel, of `pixels` strided by `channels` from x, that
// max_pool_takes keeps scanning in pixel order. Ties: the first of equal maxima wins (TF's
// reduce_max gradient instead splits dy evenly between them). NaN: the first NaN wins over any
// number, so it reaches the loss (as TF's reduce_max gives NaN) and backward routes dy to it.
template <class T>
MDTRAIN_HD std::int64_t global_max_index(const T* x, std::int64_t pixels, std::int64_t channels) {
  std::int64_t best = 0;
  for (std::int64_t p = 1; p < pixels; ++p)
    if (max_pool_takes(x[p * channels], x[best * channels])) best = p;
  return best;
}

// Global max pooling's input gradient at `pixel`: dy to the winning pixel, 0 to the others.
template <class T>
MDTRAIN_HD T global_max_grad_at(T dy, std::int64_t pixel, std::int64_t winner) {
  return pixel == winner ? dy : T(0);
}

// Average pooling divides by the number of in-bounds elements of the window (TF's "same"
// padding does not count the padding).
MDTRAIN_HD std::int64_t window_count(std::int64_t h_lo, std::int64_t h_hi, std::int64_t w_lo, std::int64_t w_hi) {
  return (h_hi - h_lo) * (w_hi - w_lo);
}

}  // namespace math
}  // namespace mdtrain
