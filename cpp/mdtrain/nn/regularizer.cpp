#include "mdtrain/nn/regularizer.h"

#include <cctype>
#include <cmath>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {
template <class T>
double penalty(const T* w, std::int64_t n, double l1, double l2) {
  double a = 0, s = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    a += std::fabs(static_cast<double>(w[i]));
    s += static_cast<double>(w[i]) * w[i];
  }
  return l1 * a + l2 * s;
}
template <class T>
void penalty_grad(const T* w, std::int64_t n, double l1, double l2, T* g) {
  for (std::int64_t i = 0; i < n; ++i) {
    T sign = w[i] > T(0) ? T(1) : (w[i] < T(0) ? T(-1) : T(0));
    g[i] += static_cast<T>(l1) * sign + static_cast<T>(2.0 * l2) * w[i];
  }
}

// Weights on a GPU are penalized on a host copy (a few small tensors a step; the penalty and its
// gradient are the host's, so a GPU replica adds exactly what a CPU replica adds).
Tensor host_copy(const Tensor& t) {
  Tensor h(t.shape(), t.dtype());
  h.copy_from(t);
  return h;
}
}  // namespace

double Regularizer::loss(const Tensor& w_any) const {
  const Tensor w = w_any.device().is_cpu() ? w_any : host_copy(w_any);
  return dispatch_floating(w.dtype(), "regularizer", [&](auto tag) {
    using T = decltype(tag);
    return penalty(w.data<T>(), w.numel(), l1_, l2_);
  });
}

void Regularizer::add_gradient(const Tensor& w_any, Tensor& grad_any) const {
  const bool on_host = w_any.device().is_cpu() && grad_any.device().is_cpu();
  const Tensor w = on_host ? w_any : host_copy(w_any);
  Tensor grad = on_host ? grad_any : host_copy(grad_any);
  dispatch_floating(w.dtype(), "regularizer", [&](auto tag) {
    using T = decltype(tag);
    penalty_grad(w.data<T>(), w.numel(), l1_, l2_, grad.data<T>());
  });
  if (!on_host) grad_any.copy_from(grad);
}

Json Regularizer::config() const {
  Json cfg = Json::object();
  cfg.set("l1", l1_);
  cfg.set("l2", l2_);
  Json c = Json::object();
  c.set("class_name", "L1L2");
  c.set("config", cfg);
  return c;
}

std::unique_ptr<Regularizer> make_regularizer(const Json& spec) {
  if (spec.is_null()) return nullptr;
  std::string name;
  Json cfg = Json::object();
  if (spec.is_string()) name = spec.as_string();
  else if (spec.is_object()) {
    name = spec.at("class_name").as_string();
    cfg = spec.get("config", Json::object());
  } else {
    fail<std::invalid_argument>("[regularizer] expected a name or a config object, got ", spec.dump());
  }
  std::string n;
  for (char c : name)
    if (c != '_') n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto num = [&](const char* key, double fallback) {
    return cfg.contains(key) && !cfg.at(key).is_null() ? cfg.at(key).as_number() : fallback;
  };
  std::unique_ptr<Regularizer> r;
  if (n == "l1") r = std::make_unique<Regularizer>(num("l1", 0.01), 0.0);
  else if (n == "l2") r = std::make_unique<Regularizer>(0.0, num("l2", 0.01));
  else if (n == "l1l2") r = std::make_unique<Regularizer>(num("l1", 0.0), num("l2", 0.0));  // Keras's L1L2 defaults
  else fail<std::invalid_argument>("[regularizer] unknown regularizer '", name, "'; known: l1, l2, l1_l2");
  return r;
}

}  // namespace mdtrain
