#pragma once
#include <memory>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/core/parameter.h"
#include "mdtrain/nn/initializer.h"
#include "mdtrain/nn/regularizer.h"
#include "mdtrain/ops/activation.h"

namespace mdtrain {

// The weights of a layer y = activation(op(x, kernel) + bias) (Dense, Conv2D): a kernel, a bias
// used only when the layer's use_bias is set, and their optional regularizers. It does the Layer
// duties that depend on nothing else, so such layers share them instead of each writing them out.
// use_bias and built stay with the layer (its Options and Layer state); they are passed in.
struct KernelBias {
  std::shared_ptr<Regularizer> kernel_regularizer, bias_regularizer;  // null: none
  Parameter kernel, bias;

  // Layer::parameters(): none before build; then the kernel and, with use_bias, the bias.
  std::vector<Parameter*> parameters(bool built, bool use_bias);
  // Layer::regularization_loss(): the regularizers' penalties (0 before build).
  double regularization_loss(bool built, bool use_bias) const;
  // Layer::add_regularization_gradients(): adds each penalty's gradient to its weight's grad.
  void add_regularization_gradients(bool use_bias);
  // For Layer::clone(): a copy of other's built weights (fresh gradients); regularizers are
  // not copied (a clone made from the options already has its own).
  void copy_values_from(const KernelBias& other, bool built, bool use_bias);

  // The end of forward, given z = op(x, kernel) (the matmul or convolution; rows of channels):
  // y = activation(z + bias). With keep_preactivation, z + bias is left in z (see
  // keeps_preactivation below) and y must be another buffer; otherwise z may be y.
  void add_bias_and_activate(Tensor& z, bool use_bias, Activation activation, bool keep_preactivation, Tensor& y) const;

  // For Layer::config(): the Keras fields such layers share, in Keras's order: activation,
  // use_bias, kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer.
  // Options: Dense::Options or Conv2D::Options.
  template <class Options>
  void write_config(Json& c, Activation activation, const Options& o) const {
    c.set("activation", name_of(activation));
    c.set("use_bias", o.use_bias);
    c.set("kernel_initializer", make_initializer(o.kernel_initializer)->config());
    c.set("bias_initializer", make_initializer(o.bias_initializer)->config());
    c.set("kernel_regularizer", kernel_regularizer ? kernel_regularizer->config() : Json());
    c.set("bias_regularizer", bias_regularizer ? bias_regularizer->config() : Json());
  }
};

// The inverse for a layer's Options: reads those fields from a Keras config, missing ones taking
// Keras's defaults.
template <class Options>
void read_kernel_bias_config(const Json& c, Options& o) {
  o.activation = c.get("activation", "linear").as_string();
  o.use_bias = c.get("use_bias", true).as_bool();
  o.kernel_initializer = c.get("kernel_initializer", "glorot_uniform");
  o.bias_initializer = c.get("bias_initializer", "zeros");
  o.kernel_regularizer = c.get("kernel_regularizer", Json());
  o.bias_regularizer = c.get("bias_regularizer", Json());
}

// Whether such a layer's forward keeps the pre-activation z: the gradients of the activations of
// needs_forward_input (GELU, ELU, ...) need it, and the softmax/sigmoid outputs expose it as
// logits (Layer::logits / backward_from_logits).
bool keeps_preactivation(Activation activation);

}  // namespace mdtrain
