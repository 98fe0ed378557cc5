#pragma once
// The validated op API of 2-D convolution and pooling over NHWC images: each function checks
// shapes, dtypes and devices against a Window2D and then dispatches to the device's kernels: the
// tensors of a call live in one memory (the host, or one GPU: ops/cuda/conv_kernels.h), and a GPU
// computes the same bits as the CPU.
// Convolution itself is im2col + GEMM (ops::gemm): the layer owns the GEMMs, these ops own the
// data movement around them.
#include <cstdint>
#include <functional>

#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/conv_math.h"

namespace mdtrain::ops {

// The geometry of a window (kernel or pool) of k_h x k_w with the given strides and dilations on
// an in_h x in_w x channels image, with TF's "valid" or "same" padding. out_h/out_w are 0 when a
// "valid" window does not fit (callers report that in their own terms). Throws
// std::invalid_argument when a size, stride or dilation is not positive.
Window2D make_window2d(std::int64_t in_h, std::int64_t in_w, std::int64_t channels, std::int64_t k_h, std::int64_t k_w,
                       std::int64_t stride_h, std::int64_t stride_w, std::int64_t dilation_h, std::int64_t dilation_w,
                       bool same_padding);

// Columns of a convolution: x is (images, in_h, in_w, channels); col is
// (images * out_h * out_w, k_h * k_w * channels) with one row per output position holding its
// input patch in (kh, kw, c) order — the order of a Keras kernel (kh, kw, in, filters) viewed as
// (kh * kw * in, filters), so the convolution is col @ kernel. Padding reads as zeros.
void im2col(const Tensor& x, const Window2D& g, Tensor& col);
// The columns of a run of output rows only, numbered across the batch (row r is output row
// r % out_h of image r / out_h): col is (k * out_w, k_h * k_w * channels) for rows
// [first_row, first_row + k). This is how a layer bounds its column buffer for any image size.
void im2col(const Tensor& x, const Window2D& g, std::int64_t first_row, Tensor& col);

// The adjoint of im2col: dx (images, in_h, in_w, channels) is overwritten with the sum, over
// every row of col, of that row scattered back onto the input positions it was read from.
void col2im(const Tensor& col, const Window2D& g, Tensor& dx);
// The adjoint of the row-range im2col, added onto dx (not cleared: the caller zeroes dx once and
// accumulates every range, since neighbouring ranges may read the same input rows).
void col2im_accumulate(const Tensor& col, const Window2D& g, std::int64_t first_row, Tensor& dx);

// How a convolution pass over `images` images costing `macs` multiply-adds in all is cut: on the
// host, when the pass is long enough to pay for waking the intra-op team (cpu::IntraOpTeam: the
// cores one replica may use), into runs of whole images, one per team member; otherwise (a GPU, a
// short pass, one image, a busy team) one run. Calls prepare(runs) on the calling thread, then
// pass(run, first_image, last_image) for every run, concurrently, run 0 on the calling thread.
// Images never share input rows, so runs write disjoint rows of every per-image output; what the
// runs share (weight gradients) the caller sums in run order, after this returns. Returns `runs`.
int conv2d_image_runs(const Device& device, std::int64_t images, std::int64_t macs,
                      const std::function<void(int runs)>& prepare,
                      const std::function<void(int run, std::int64_t first_image, std::int64_t last_image)>& pass);

// Max pooling: y (images, out_h, out_w, channels) is the maximum over each window's in-bounds
// elements (padding never wins); argmax (Int32, y's shape and device) records where it was, as in_h-major
// spatial index ih * in_w + iw, for the backward pass. Ties go to the first element in
// row-major window order; a NaN in a window is the result.
void max_pool2d(const Tensor& x, const Window2D& g, Tensor& y, Tensor& argmax);
// dx = 0, then dx[argmax] += dy for every output element (overlapping windows add up).
void max_pool2d_backward(const Tensor& dy, const Tensor& argmax, const Window2D& g, Tensor& dx);

// Average pooling over the in-bounds elements of each window (TF's "same" padding: the padding
// is not counted).
void avg_pool2d(const Tensor& x, const Window2D& g, Tensor& y);
void avg_pool2d_backward(const Tensor& dy, const Window2D& g, Tensor& dx);

// Global average pooling: x (images, h, w, channels) → y with images * channels elements (any
// shape), the mean over h * w; backward spreads dy / (h * w) over the image.
void global_avg_pool2d(const Tensor& x, Tensor& y);
void global_avg_pool2d_backward(const Tensor& dy, Tensor& dx);

// Global max pooling (GlobalMaxPooling1D/2D): y[b, c] = the maximum of x[b, :, :, c] (x (images,
// height, width, channels), y any shape of images * channels values), and argmax (Int32, y's
// shape) the winning pixel (h * width + w) by math::global_max_index: the first of equal maxima,
// a NaN over numbers. Backward writes dy to each winner and 0 to every other element of dx.
void global_max_pool2d(const Tensor& x, Tensor& y, Tensor& argmax);
void global_max_pool2d_backward(const Tensor& dy, const Tensor& argmax, Tensor& dx);

}  // namespace mdtrain::ops
