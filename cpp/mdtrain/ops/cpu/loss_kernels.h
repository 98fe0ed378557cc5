#pragma once
// CPU row loops behind loss_ops.h. Arguments are already validated: pred is (rows, cols) with
// cols >= 1, labels hold valid class ids (or ignore), g is null or (rows, cols) and does not alias
// pred. T is the prediction type (float, double); L the label or target type (float, double,
// int32, int64, uint8). Sums over rows are accumulated in double.
#include <cstdint>

#include "mdtrain/ops/loss_math.h"

namespace mdtrain::cpu {

template <class L>
std::int64_t first_invalid_label(const L* labels, std::int64_t n, std::int64_t classes, bool has_ignore,
                                 std::int64_t ignore);
template <class L>
std::int64_t count_equal(const L* labels, std::int64_t n, double value);

template <class T, class L>
double sparse_xent(const L* labels, const T* pred, std::int64_t rows, std::int64_t cols, bool from_logits,
                   bool has_ignore, std::int64_t ignore, T scale, math::RowWeights weights, T* g);
template <class T, class L>
double dense_xent(const L* target, const T* pred, std::int64_t rows, std::int64_t cols, bool from_logits, T smoothing,
                  T scale, math::RowWeights weights, T* g);
template <class T, class L>
double binary_xent(const L* target, const T* pred, std::int64_t rows, std::int64_t cols, bool from_logits, T smoothing,
                   T scale, math::RowWeights weights, T* g);
template <class T, class L>
double squared_error(const L* target, const T* pred, std::int64_t rows, std::int64_t cols, T scale,
                     math::RowWeights weights, T* g);
template <class T, class L>
double absolute_error(const L* target, const T* pred, std::int64_t rows, std::int64_t cols, T scale,
                      math::RowWeights weights, T* g);

template <class T, class L>
double sparse_argmax_matches(const L* labels, const T* pred, std::int64_t rows, std::int64_t cols);
template <class T, class L>
double argmax_matches(const L* target, const T* pred, std::int64_t rows, std::int64_t cols);
template <class T, class L>
double top_k_matches(const L* labels, const T* pred, std::int64_t rows, std::int64_t cols, std::int64_t k);
template <class T, class L>
double threshold_matches(const L* target, const T* pred, std::int64_t n, double threshold);

}  // namespace mdtrain::cpu
