#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/layer.h"

namespace mdtrain {

// A layer applied to several inputs at once (Keras's Merge layers: the element-wise merges,
// Concatenate, Dot).
// Only a LayerGraph calls them: build_inputs/forward_inputs/backward_inputs take one shape or
// tensor per input; the single-input Layer calls throw. A merge layer has no weights.
class MergeLayer : public Layer {
 public:
  using Layer::Layer;

  // Builds for inputs shaped (batch, *input_shapes[k]); throws std::invalid_argument naming the
  // layer and the shapes when they cannot be merged (Keras checks the same at the call).
  void build_inputs(const std::vector<Shape>& input_shapes, DType dtype = DType::Float32);
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  virtual Shape merged_shape(const std::vector<Shape>& input_shapes) const = 0;
  // Keras's compute_mask of the merge: whether its output carries its inputs' merged mask (Dot's
  // does not), and whether its values depend on the masks (Keras's Multiply, Maximum and Minimum
  // treat masked steps specially: mdtrain refuses masks there for now).
  virtual bool keeps_masks() const { return true; }
  virtual bool reads_masks() const { return false; }

  // Each x[k] is (batch, *input_shapes()[k]). The result stays valid until the next forward.
  virtual Tensor forward_inputs(const std::vector<Tensor>& x) = 0;
  // dL/dx[k] for every input, given dL/dy of the last forward.
  virtual std::vector<Tensor> backward_inputs(const Tensor& dy) = 0;

  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;

 protected:
  // For clone(): the copy is built exactly as this layer is.
  void copy_merge_state(const MergeLayer& other) {
    copy_build_state(other);
    input_shapes_ = other.input_shapes_;
  }
  // Checks x against the built input shapes (Keras's message for an input that does not fit).
  void check_inputs(const std::vector<Tensor>& x) const;
  // Called at the end of build_inputs, once the shapes are set (a merge's plan of its reads).
  virtual void after_build() {}

  std::vector<Shape> input_shapes_;
};

}  // namespace mdtrain
