#include "mdtrain/nn/kernel_bias.h"

#include "mdtrain/ops/ops.h"

namespace mdtrain {

std::vector<Parameter*> KernelBias::parameters(bool built, bool use_bias) {
  if (!built) return {};
  if (use_bias) return {&kernel, &bias};
  return {&kernel};
}

double KernelBias::regularization_loss(bool built, bool use_bias) const {
  double l = 0;
  if (kernel_regularizer && built) l += kernel_regularizer->loss(kernel.value);
  if (bias_regularizer && built && use_bias) l += bias_regularizer->loss(bias.value);
  return l;
}

void KernelBias::add_regularization_gradients(bool use_bias) {
  if (kernel_regularizer) kernel_regularizer->add_gradient(kernel.value, kernel.grad);
  if (bias_regularizer && use_bias) bias_regularizer->add_gradient(bias.value, bias.grad);
}

void KernelBias::copy_values_from(const KernelBias& other, bool built, bool use_bias) {
  if (!built) return;
  kernel = Parameter(other.kernel.name, other.kernel.value.clone());
  if (use_bias) bias = Parameter(other.bias.name, other.bias.value.clone());
}

void KernelBias::add_bias_and_activate(Tensor& z, bool use_bias, Activation activation, bool keep_preactivation,
                                       Tensor& y) const {
  const Tensor no_bias;
  const Tensor& b = use_bias ? bias.value : no_bias;
  if (keep_preactivation) {
    ops::bias_activation(z, b, Activation::Linear, z);
    ops::bias_activation(z, no_bias, activation, y);
  } else {
    ops::bias_activation(z, b, activation, y);
  }
}

bool keeps_preactivation(Activation activation) {
  return needs_forward_input(activation) || activation == Activation::Softmax || activation == Activation::Sigmoid;
}

}  // namespace mdtrain
