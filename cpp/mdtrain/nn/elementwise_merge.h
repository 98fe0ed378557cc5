#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/nn/merge_layer.h"

namespace mdtrain {

// Merges of inputs of one shape, element by element (Keras requires equal shapes: no broadcast).
class ElementwiseMerge : public MergeLayer {
 public:
  using MergeLayer::MergeLayer;
  Shape merged_shape(const std::vector<Shape>& input_shapes) const override;
};

// keras.layers.Add: y = x[0] + x[1] + ... (summed in input order); dL/dx[k] = dL/dy.
class Add final : public ElementwiseMerge {
 public:
  explicit Add(std::string name) : ElementwiseMerge(std::move(name)) {}
  std::string class_name() const override { return "Add"; }
  Tensor forward_inputs(const std::vector<Tensor>& x) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy) override;
  std::unique_ptr<Layer> clone() const override;
  static std::unique_ptr<Layer> from_config(const Json& config);

 private:
  Tensor y_;
  std::size_t inputs_ = 0;
};

// keras.layers.Multiply: y = x[0] * x[1] * ... ; dL/dx[k] = dL/dy times the other inputs.
class Multiply final : public ElementwiseMerge {
 public:
  explicit Multiply(std::string name) : ElementwiseMerge(std::move(name)) {}
  std::string class_name() const override { return "Multiply"; }
  Tensor forward_inputs(const std::vector<Tensor>& x) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy) override;
  std::unique_ptr<Layer> clone() const override;
  static std::unique_ptr<Layer> from_config(const Json& config);

 private:
  Tensor y_;
  std::vector<Tensor> x_;  // the last forward's inputs (their producers keep them until then)
};

}  // namespace mdtrain
