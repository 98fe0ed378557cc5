#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/core/parameter.h"
#include "mdtrain/nn/regularizer.h"

namespace mdtrain {

// The affine weights of a normalization layer, y = gamma * xhat + beta (BatchNormalization,
// LayerNormalization): gamma, used when the layer's `scale` is set, beta, used when its `center`
// is set, and their optional regularizers. It does the Layer duties that depend on nothing else,
// so the normalization layers share them. scale, center and built stay with the layer (its
// Options and Layer state); they are passed in.
struct GammaBeta {
  std::shared_ptr<Regularizer> gamma_regularizer, beta_regularizer;  // null: none
  Parameter gamma, beta;

  // For Layer::build_weights: "<layer>/gamma" and "<layer>/beta" of shape (features,), filled by
  // their initializers with Keras's fans of a 1-D shape (features, features), from the streams 0
  // (gamma) and 1 (beta) of `seed`.
  void build(const std::string& layer, std::int64_t features, DType dtype, std::uint64_t seed, bool scale, bool center,
             const Json& gamma_initializer, const Json& beta_initializer);
  // Layer::parameters() order: gamma (with scale), then beta (with center); none before build.
  std::vector<Parameter*> parameters(bool built, bool scale, bool center);
  // Layer::regularization_loss(): the regularizers' penalties (0 before build).
  double regularization_loss(bool built, bool scale, bool center) const;
  // Layer::add_regularization_gradients(): adds each penalty's gradient to its weight's grad.
  void add_regularization_gradients(bool scale, bool center);
  // For Layer::clone(): a copy of other's built weights (fresh gradients); regularizers are not
  // copied (a clone made from the options already has its own).
  void copy_values_from(const GammaBeta& other, bool built, bool scale, bool center);

  // gamma's value with scale, else an undefined tensor (the normalization ops read: no gamma).
  Tensor gamma_or_none(bool scale) const { return scale ? gamma.value : Tensor(); }
  Tensor beta_or_none(bool center) const { return center ? beta.value : Tensor(); }
  // backward's weight gradients from the float64 per-feature sums over the rows:
  // dgamma = sum(dy * xhat), dbeta = sum(dy). The sums and the weights may be on any device (a GPU
  // replica's sums come to the host to be rounded to the weights' dtype).
  void store_gradients(const Tensor& sum_dy, const Tensor& sum_dy_xhat, bool scale, bool center);
};

// Reads the Keras config fields the normalization layers share into their Options (center,
// scale, beta/gamma initializers and regularizers), missing ones taking Keras's defaults.
// Options: BatchNormalization::Options or LayerNormalization::Options.
template <class Options>
void read_gamma_beta_config(const Json& c, Options& o) {
  o.center = c.get("center", true).as_bool();
  o.scale = c.get("scale", true).as_bool();
  o.beta_initializer = c.get("beta_initializer", "zeros");
  o.gamma_initializer = c.get("gamma_initializer", "ones");
  o.beta_regularizer = c.get("beta_regularizer", Json());
  o.gamma_regularizer = c.get("gamma_regularizer", Json());
}

// dst (float32 or float64, n elements, on any device) = src (n doubles in host memory):
// per-feature statistics and sums are kept in float64 whatever the layer's dtype.
void store_float64(const double* src, Tensor& dst);
// The elements of src (float32 or float64, on any device) as doubles in host memory: what the
// per-feature arithmetic on the host reads (a GPU tensor is copied to the host first).
std::vector<double> load_float64(const Tensor& src);

}  // namespace mdtrain
