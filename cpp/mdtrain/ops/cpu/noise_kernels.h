#pragma once
// The CPU bodies of ops/noise.h. Arguments are already validated.
#include <cstdint>

namespace mdtrain::cpu {

template <class T>
void gaussian_noise(const T* x, std::int64_t n, double stddev, std::uint64_t seed, std::uint64_t stream,
                    std::uint64_t first_element, T* y);
template <class T>
void gaussian_dropout(const T* x, std::int64_t n, double stddev, std::uint64_t seed, std::uint64_t stream,
                      std::uint64_t first_element, T* multiplier, T* y);
template <class T>
void dropout_mask(std::int64_t n, double rate, std::uint64_t seed, std::uint64_t stream, std::uint64_t first_element,
                  T* mask);
// x and y: rows * inner * channels; mask: rows * channels.
template <class T>
void scale_channels(const T* x, const T* mask, std::int64_t rows, std::int64_t inner, std::int64_t channels, T* y);
template <class T>
double activity_penalty(const T* x, std::int64_t n, double l1, double l2);
template <class T>
void activity_penalty_backward(const T* x, const T* dy, std::int64_t n, T l1_scaled, T l2_scaled, T* dx);

}  // namespace mdtrain::cpu
