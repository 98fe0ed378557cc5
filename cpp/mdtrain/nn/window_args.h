#pragma once
// Arguments shared by the window layers (Conv1D/Conv2D, the pooling layers): Keras's checks of
// n-tuples, padding and data_format, and its rank error for inputs of the wrong rank. Every
// message names the layer and the argument.
#include <cstdint>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/core/shape.h"
#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/conv_math.h"

namespace mdtrain {

// Keras's standardize_tuple: `value` must hold exactly two integers > 0. `area` is the message
// prefix ("conv2d"); throws std::invalid_argument naming the layer, the argument and the value.
void check_pair_arg(const char* area, const std::string& layer, const char* arg,
                    const std::vector<std::int64_t>& value);
// The same for an n-tuple (n = 1 for the 1-D layers: "a tuple of 1 integers", as Keras words it);
// allow_zero accepts 0 too (Keras's allow_zero: the transposed convolutions' output_padding).
void check_tuple_arg(const char* area, const std::string& layer, const char* arg,
                     const std::vector<std::int64_t>& value, std::size_t n, bool allow_zero = false);
// "valid" or "same" (or "causal" with allow_causal: Conv1D), in any case (Keras lowercases it);
// returns the lowercase form.
std::string check_padding_arg(const char* area, const std::string& layer, const std::string& padding,
                              bool allow_causal = false);
// Only "channels_last" is supported: "channels_first" is a clear error, anything else too.
void check_data_format_arg(const char* area, const std::string& layer, const std::string& data_format);
// Keras's rank error when `input_shape` (batch excluded) is not an image (height, width, channels).
void check_image_input_shape(const char* area, const std::string& layer, const Shape& input_shape);
// The same for a sequence (steps, channels), the input of the 1-D layers.
void check_sequence_input_shape(const char* area, const std::string& layer, const Shape& input_shape);
// Keras's error for a window that does not fit in the image with padding="valid" (no output
// row or column): `window` is the argument and its value, e.g. "pool_size (3, 3)"; `input_shape`
// is without the batch, its first `spatial_rank` axes the spatial ones. Throws
// std::invalid_argument naming the layer and the full input shape.
[[noreturn]] void fail_window_larger_than_input(const char* area, const std::string& layer, const std::string& window,
                                                const Shape& input_shape, int spatial_rank = 2);

// "(3, 3)": a pair as Python prints a tuple (negative values stay numbers, unlike to_string(Shape)).
std::string tuple_string(const std::vector<std::int64_t>& value);
// Config values: an integer n reads as (n, n), an array as itself.
std::vector<std::int64_t> pair_from_json(const Json& value);
// The same for an n-tuple: an integer reads as n copies of it.
std::vector<std::int64_t> tuple_from_json(const Json& value, std::size_t n);
Json pair_to_json(const std::vector<std::int64_t>& value);

// Window layers (convolutions, pools) built for unknown spatial dimensions (core/shape.h): the
// input shape (batch excluded, channels last) with each unknown spatial dimension i replaced by
// extents[i], the smallest size the window fits, so the arguments are checked as for a real size.
Shape with_spatial_stand_ins(const Shape& input_shape, const std::vector<std::int64_t>& extents);
// `output_shape` (same rank) with its spatial dimensions unknown wherever the input's are.
Shape with_unknown_spatial_dims(const Shape& input_shape, Shape output_shape);
// Whether the window `g` was made for x's spatial size (x: (batch, steps, c) or (batch, h, w, c)).
bool window_fits(const Window2D& g, const Tensor& x);

}  // namespace mdtrain
