#include "mdtrain/ops/cpu/activation_layer_kernels.h"

namespace mdtrain::cpu {

template <class T>
void parametric_activation(const T* x, std::int64_t n, const ops::ParametricActivation& a, T* y) {
  if (a.kind == ops::ParametricActivation::Kind::ELU) {
    const T alpha = static_cast<T>(a.alpha);
    for (std::int64_t i = 0; i < n; ++i) y[i] = math::elu_with_alpha(x[i], alpha);
    return;
  }
  const math::ReluArgs<T> r = ops::relu_args<T>(a);
  for (std::int64_t i = 0; i < n; ++i) y[i] = math::relu_with_args(x[i], r);
}

template <class T>
void parametric_activation_backward(const ops::ParametricActivation& a, const T* x, const T* dy, std::int64_t n,
                                    T* dx) {
  if (a.kind == ops::ParametricActivation::Kind::ELU) {
    const T alpha = static_cast<T>(a.alpha);
    for (std::int64_t i = 0; i < n; ++i) dx[i] = math::elu_with_alpha_backward(dy[i], x[i], alpha);
    return;
  }
  const math::ReluArgs<T> r = ops::relu_args<T>(a);
  for (std::int64_t i = 0; i < n; ++i) dx[i] = math::relu_with_args_backward(dy[i], x[i], r);
}

template <class T>
void prelu(const T* x, const T* alpha, std::int64_t n, const math::AxesPlan& plan, T* y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = math::prelu(x[i], alpha[math::row_of(plan, i)]);
}

template <class T>
void prelu_backward(const T* x, const T* alpha, const T* dy, std::int64_t n, const math::AxesPlan& plan, T* dx,
                    T* dalpha) {
  for (std::int64_t r = 0; r < plan.rows; ++r) dalpha[r] = math::prelu_alpha_grad_row(x, dy, plan, r);
  if (!dx) return;
  for (std::int64_t i = 0; i < n; ++i) dx[i] = math::prelu_input_grad(dy[i], x[i], alpha[math::row_of(plan, i)]);
}

template <class T>
void softmax_over_axes(const T* x, const math::AxesPlan& plan, T* y) {
  for (std::int64_t r = 0; r < plan.rows; ++r) math::softmax_over_row(x, y, plan, r);
}

template <class T>
void softmax_over_axes_backward(const T* y, const T* dy, const math::AxesPlan& plan, T* dx) {
  for (std::int64_t r = 0; r < plan.rows; ++r) math::softmax_over_backward_row(y, dy, dx, plan, r);
}

template <class T>
void unit_normalize(const T* x, const math::AxesPlan& plan, T* y) {
  for (std::int64_t r = 0; r < plan.rows; ++r) math::unit_normalize_row(x, y, plan, r);
}

template <class T>
void unit_normalize_backward(const T* x, const T* dy, const math::AxesPlan& plan, T* dx) {
  for (std::int64_t r = 0; r < plan.rows; ++r) math::unit_normalize_backward_row(x, dy, dx, plan, r);
}

#define MDTRAIN_INSTANTIATE(T)                                                                                        \
  template void parametric_activation<T>(const T*, std::int64_t, const ops::ParametricActivation&, T*);               \
  template void parametric_activation_backward<T>(const ops::ParametricActivation&, const T*, const T*, std::int64_t, \
                                                  T*);                                                                \
  template void prelu<T>(const T*, const T*, std::int64_t, const math::AxesPlan&, T*);                                \
  template void prelu_backward<T>(const T*, const T*, const T*, std::int64_t, const math::AxesPlan&, T*, T*);         \
  template void softmax_over_axes<T>(const T*, const math::AxesPlan&, T*);                                            \
  template void softmax_over_axes_backward<T>(const T*, const T*, const math::AxesPlan&, T*);                         \
  template void unit_normalize<T>(const T*, const math::AxesPlan&, T*);                                               \
  template void unit_normalize_backward<T>(const T*, const T*, const math::AxesPlan&, T*);
MDTRAIN_INSTANTIATE(float)
MDTRAIN_INSTANTIATE(double)
#undef MDTRAIN_INSTANTIATE

}  // namespace mdtrain::cpu
