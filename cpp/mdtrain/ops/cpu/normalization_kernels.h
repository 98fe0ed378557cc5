#pragma once
// CPU loops behind ops/normalization.h. Arguments are already validated: data is row-major
// (rows, channels), statistics are double arrays, gamma/beta may be null (1 and 0), and outputs
// do not alias inputs except where ops/normalization.h allows it. T is float or double.
#include <cstdint>

namespace mdtrain::cpu {

template <class T>
void channel_moments(const T* x, std::int64_t rows, std::int64_t channels, double* mean, double* var);
template <class T>
void channel_sums(const T* x, std::int64_t rows, std::int64_t channels, const double* shift, double* sum,
                  double* sum_squares);
template <class T>
void channel_normalize(const T* x, std::int64_t rows, std::int64_t channels, const double* mean, const double* inv_std,
                       const T* gamma, const T* beta, T* xhat, T* y);
template <class T>
void channel_grad_sums(const T* dy, const T* xhat, std::int64_t rows, std::int64_t channels, double* sum_dy,
                       double* sum_dy_xhat);
template <class T>
void channel_normalize_backward(const T* dy, const T* xhat, std::int64_t rows, std::int64_t channels,
                                const double* scale, const double* mean_dy, const double* mean_dy_xhat, T* dx);

template <class T>
void row_normalize(const T* x, std::int64_t rows, std::int64_t channels, double epsilon, const T* gamma, const T* beta,
                   T* xhat, double* inv_std, T* y);
template <class T>
void row_normalize_backward(const T* dy, const T* xhat, std::int64_t rows, std::int64_t channels, const double* inv_std,
                            const T* gamma, T* dx);

}  // namespace mdtrain::cpu
