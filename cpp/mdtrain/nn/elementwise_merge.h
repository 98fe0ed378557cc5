#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/nn/merge_layer.h"

namespace mdtrain {

// Keras's element-wise merges, folded in input order: y = x[0], then y = op(y, x[k]) for each
// further input (Average divides the sum by the input count; Subtract takes exactly two inputs).
// Shapes broadcast as Keras's Merge broadcasts them: an input of lower rank gains axes of size 1
// after the batch axis (Keras's expand_dims(x, 1)), then each axis is equal or 1 (NumPy's rule,
// right-aligned, on the shapes without the batch axis); anything else is refused at the call.
// Backward sums each input's gradient over the axes it was broadcast along.
class ElementwiseMerge : public MergeLayer {
 public:
  enum class Fold { Sum, Product, Difference, Mean, Maximum, Minimum };
  ElementwiseMerge(std::string name, Fold fold) : MergeLayer(std::move(name)), fold_(fold) {}
  std::string class_name() const override;
  Fold fold() const { return fold_; }
  bool reads_masks() const override {
    return fold_ == Fold::Product || fold_ == Fold::Maximum || fold_ == Fold::Minimum;
  }
  // Keras's output shape of the inputs (batch axis excluded); std::invalid_argument naming the
  // layer and the two shapes that do not broadcast, or (Subtract) a count other than two.
  Shape merged_shape(const std::vector<Shape>& input_shapes) const override;
  Tensor forward_inputs(const std::vector<Tensor>& x) override;
  // Sum: dL/dy to every input; Difference: dL/dy and -dL/dy; Mean: dL/dy / n; Product: dL/dy
  // times every other input; Maximum/Minimum: dL/dy to the input that won each element (TF's
  // rule on ties and NaN: ops/merge_math.h); each then summed over its broadcast axes.
  std::vector<Tensor> backward_inputs(const Tensor& dy) override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&y_, &winner_}); }

 protected:
  template <class Merge>
  std::unique_ptr<Layer> clone_as() const {
    auto copy = std::make_unique<Merge>(name_);
    copy->copy_merge_state(*this);
    copy->offsets_ = offsets_;
    return copy;
  }
  void after_build() override;

 private:
  Fold fold_;
  // For each input, the offset in its row (one example) of every element of an output row; empty
  // when every input has the output's shape (nothing is broadcast). Set at build.
  std::vector<std::vector<std::int64_t>> offsets_;
  Tensor y_;
  Tensor winner_;          // Maximum/Minimum: per output element, the input that took it (Int32)
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

// keras.layers.Subtract: y = x[0] - x[1], exactly two inputs.
class Subtract final : public ElementwiseMerge {
 public:
  explicit Subtract(std::string name) : ElementwiseMerge(std::move(name), Fold::Difference) {}
  std::unique_ptr<Layer> clone() const override { return clone_as<Subtract>(); }
  static std::unique_ptr<Layer> from_config(const Json& config);
};

// keras.layers.Average: y = (x[0] + x[1] + ...) / n.
class Average final : public ElementwiseMerge {
 public:
  explicit Average(std::string name) : ElementwiseMerge(std::move(name), Fold::Mean) {}
  std::unique_ptr<Layer> clone() const override { return clone_as<Average>(); }
  static std::unique_ptr<Layer> from_config(const Json& config);
};

// keras.layers.Maximum: y = max(max(x[0], x[1]), ...), NaN propagating as in TF.
class Maximum final : public ElementwiseMerge {
 public:
  explicit Maximum(std::string name) : ElementwiseMerge(std::move(name), Fold::Maximum) {}
  std::unique_ptr<Layer> clone() const override { return clone_as<Maximum>(); }
  static std::unique_ptr<Layer> from_config(const Json& config);
};

// keras.layers.Minimum: y = min(min(x[0], x[1]), ...), NaN propagating as in TF.
class Minimum final : public ElementwiseMerge {
 public:
  explicit Minimum(std::string name) : ElementwiseMerge(std::move(name), Fold::Minimum) {}
  std::unique_ptr<Layer> clone() const override { return clone_as<Minimum>(); }
  static std::unique_ptr<Layer> from_config(const Json& config);
};

}  // namespace mdtrain
