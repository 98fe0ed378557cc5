#pragma once
#include <memory>
#include <string>

#include "mdtrain/nn/layer.h"

namespace mdtrain {

// keras.layers.Identity: its input unchanged (no copy), and the gradient too; it passes masks on.
class Identity : public Layer {
 public:
  explicit Identity(std::string name) : Layer(std::move(name)) {}
  std::string class_name() const override { return "Identity"; }
  bool has_cuda_kernels() const override { return true; }  // no kernel at all
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  bool supports_unknown_dims() const override { return true; }
  Tensor forward(const Tensor& x, const ForwardContext&) override {
    check_input(x);
    return x;
  }
  Tensor backward(const Tensor& dy, bool need_input_grad) override { return need_input_grad ? dy : Tensor(); }
  std::unique_ptr<Layer> clone() const override {
    auto copy = std::make_unique<Identity>(name_);
    copy->copy_build_state(*this);
    return copy;
  }
  // The layer of a Keras config ({"name"}).
  static std::unique_ptr<Layer> from_config(const Json& config) {
    return std::make_unique<Identity>(config.at("name").as_string());
  }
};

}  // namespace mdtrain
