#include "mdtrain/nn/gamma_beta.h"

#include "mdtrain/nn/initializer.h"

namespace mdtrain {

void GammaBeta::build(const std::string& layer, std::int64_t features, DType dtype, std::uint64_t seed, bool scale,
                      bool center, const Json& gamma_initializer, const Json& beta_initializer) {
  const std::int64_t d = features;
  if (scale) {
    gamma = Parameter(layer + "/gamma", Tensor({d}, dtype));
    Rng rng(seed, 0);
    make_initializer(gamma_initializer)->fill(gamma.value, d, d, rng);
  }
  if (center) {
    beta = Parameter(layer + "/beta", Tensor({d}, dtype));
    Rng rng(seed, 1);
    make_initializer(beta_initializer)->fill(beta.value, d, d, rng);
  }
}

std::vector<Parameter*> GammaBeta::parameters(bool built, bool scale, bool center) {
  if (!built) return {};
  std::vector<Parameter*> out;
  if (scale) out.push_back(&gamma);
  if (center) out.push_back(&beta);
  return out;
}

double GammaBeta::regularization_loss(bool built, bool scale, bool center) const {
  double l = 0;
  if (gamma_regularizer && built && scale) l += gamma_regularizer->loss(gamma.value);
  if (beta_regularizer && built && center) l += beta_regularizer->loss(beta.value);
  return l;
}

void GammaBeta::add_regularization_gradients(bool scale, bool center) {
  if (gamma_regularizer && scale) gamma_regularizer->add_gradient(gamma.value, gamma.grad);
  if (beta_regularizer && center) beta_regularizer->add_gradient(beta.value, beta.grad);
}

void GammaBeta::copy_values_from(const GammaBeta& other, bool built, bool scale, bool center) {
  if (!built) return;
  if (scale) gamma = Parameter(other.gamma.name, other.gamma.value.clone());
  if (center) beta = Parameter(other.beta.name, other.beta.value.clone());
}

void GammaBeta::store_gradients(const Tensor& sum_dy, const Tensor& sum_dy_xhat, bool scale, bool center) {
  if (scale) store_float64(load_float64(sum_dy_xhat).data(), gamma.grad);
  if (center) store_float64(load_float64(sum_dy).data(), beta.grad);
}

void store_float64(const double* src, Tensor& dst) {
  if (!dst.device().is_cpu()) {
    // Rounded on the host, then one copy (a few KB of per-feature values).
    Tensor host(dst.shape(), dst.dtype());
    store_float64(src, host);
    dst.copy_from(host);
    return;
  }
  if (dst.dtype() == DType::Float32) {
    float* d = dst.data<float>();
    for (std::int64_t i = 0; i < dst.numel(); ++i) d[i] = static_cast<float>(src[i]);
  } else {
    double* d = dst.data<double>();
    for (std::int64_t i = 0; i < dst.numel(); ++i) d[i] = src[i];
  }
}

std::vector<double> load_float64(const Tensor& src) {
  Tensor host = src;
  if (!src.device().is_cpu()) {
    host = Tensor(src.shape(), src.dtype());
    host.copy_from(src);  // returns once the data is on the host
  }
  std::vector<double> out(static_cast<std::size_t>(host.numel()));
  for (std::int64_t i = 0; i < host.numel(); ++i)
    out[static_cast<std::size_t>(i)] =
        host.dtype() == DType::Float32 ? static_cast<double>(host.data<float>()[i]) : host.data<double>()[i];
  return out;
}

}  // namespace mdtrain
