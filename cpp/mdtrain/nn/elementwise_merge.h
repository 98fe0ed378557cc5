#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/nn/merge_layer.h"

namespace mdtrain {

// Merges of inputs of one shape, element by element (Keras requires equal shapes: no broadcast),
// folded in input order: a sum (Add) or a product (Multiply).
class ElementwiseMerge : public MergeLayer {
 public:
  enum class Fold { Sum, Product };
  ElementwiseMerge(std::string name, Fold fold) : MergeLayer(std::move(name)), fold_(fold) {}
  std::string class_name() const override { return fold_ == Fold::Sum ? "Add" : "Multiply"; }
  Shape merged_shape(const std::vector<Shape>& input_shapes) const override;
  Tensor forward_inputs(const std::vector<Tensor>& x) override;
  // Sum: dL/dx[k] = dL/dy. Product: dL/dy times every other input.
  std::vector<Tensor> backward_inputs(const Tensor& dy) override;

 protected:
  template <class Merge>
  std::unique_ptr<Layer> clone_as() const {
    auto copy = std::make_unique<Merge>(name_);
    copy->copy_merge_state(*this);
    return copy;
  }

 private:
  Fold fold_;
  Tensor y_;
  std::vector<Tensor> x_;  // the last forward's inputs (their producers keep them until then)
};

// keras.layers.Add: y = x[0] + x[1] + ...
class Add final : public ElementwiseMerge {
 public:
  explicit Add(std::string name) : ElementwiseMerge(std::move(name), Fold::Sum) {}
  std::unique_ptr<Layer> clone() const override { return clone_as<Add>(); }
  static std::unique_ptr<Layer> from_config(const Json& config);
};

// keras.layers.Multiply: y = x[0] * x[1] * ...
class Multiply final : public ElementwiseMerge {
 public:
  explicit Multiply(std::string name) : ElementwiseMerge(std::move(name), Fold::Product) {}
  std::unique_ptr<Layer> clone() const override { return clone_as<Multiply>(); }
  static std::unique_ptr<Layer> from_config(const Json& config);
};

}  // namespace mdtrain
