#pragma once
// CPU kernel bodies behind conv_ops.h. Arguments are already validated; images are NHWC and
// contiguous; `images` is the batch size of the call.
#include <cstdint>

#include "mdtrain/ops/conv_math.h"

namespace mdtrain::cpu {

// Output rows are numbered across the batch: row r is output row r % out_h of image r / out_h.
// im2col writes the columns of rows [first_row, first_row + rows); col2im_accumulate adds them
// back onto dx (the whole batch's input gradient), which it does not clear.
template <class T>
void im2col(const T* x, std::int64_t first_row, std::int64_t rows, const Window2D& g, T* col);
template <class T>
void col2im_accumulate(const T* col, std::int64_t first_row, std::int64_t rows, const Window2D& g, T* dx);
template <class T>
void max_pool2d(const T* x, std::int64_t images, const Window2D& g, T* y, std::int32_t* argmax);
template <class T>
void max_pool2d_backward(const T* dy, const std::int32_t* argmax, std::int64_t images, const Window2D& g, T* dx);
template <class T>
void avg_pool2d(const T* x, std::int64_t images, const Window2D& g, T* y);
template <class T>
void avg_pool2d_backward(const T* dy, std::int64_t images, const Window2D& g, T* dx);
template <class T>
void global_avg_pool2d(const T* x, std::int64_t images, std::int64_t pixels, std::int64_t channels, T* y);
template <class T>
void global_avg_pool2d_backward(const T* dy, std::int64_t images, std::int64_t pixels, std::int64_t channels, T* dx);
template <class T>
void global_max_pool2d(const T* x, std::int64_t images, std::int64_t pixels, std::int64_t channels, T* y,
                       std::int32_t* argmax);
template <class T>
void global_max_pool2d_backward(const T* dy, const std::int32_t* argmax, std::int64_t images, std::int64_t pixels,
                                std::int64_t channels, T* dx);

}  // namespace mdtrain::cpu
