#pragma once
// CPU kernel bodies behind ops.h. Arguments are already validated.
#include <cstdint>

#include "mdtrain/ops/activation.h"

namespace mdtrain::cpu {

template <class T>
void bias_activation(const T* z, const T* bias, std::int64_t rows, std::int64_t cols, Activation act, T* y);
template <class T>
void activation_backward(Activation act, const T* z, const T* y, const T* dy, std::int64_t rows, std::int64_t cols,
                         T* dz);
template <class T>
void sum_rows(const T* x, std::int64_t rows, std::int64_t cols, T beta, T* out);
template <class T>
void dropout(const T* x, std::int64_t n, double rate, std::uint64_t seed, std::uint64_t stream,
             std::uint64_t first_element, T* mask, T* y);
template <class T>
void multiply(const T* a, const T* b, std::int64_t n, T* y);
template <class T>
bool all_finite(const T* x, std::int64_t n);
template <class T>
double sum_of_squares(const T* x, std::int64_t n);

}  // namespace mdtrain::cpu
