#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/nn/merge_layer.h"

namespace mdtrain {

// keras.layers.Concatenate(axis=-1): joins the inputs along `axis` (counted with the batch axis,
// negative from the end, as Keras does); every other dimension must agree.
class Concatenate final : public MergeLayer {
 public:
  Concatenate(std::string name, int axis = -1) : MergeLayer(std::move(name)), axis_(axis) {}
  std::string class_name() const override { return "Concatenate"; }
  int axis() const { return axis_; }
  Shape merged_shape(const std::vector<Shape>& input_shapes) const override;
  Tensor forward_inputs(const std::vector<Tensor>& x) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy) override;
  std::unique_ptr<Layer> clone() const override;
  Json config() const override;  // Layer's fields and "axis"
  static std::unique_ptr<Layer> from_config(const Json& config);

 private:
  // The axis as an index into a shape without the batch axis; throws naming the layer.
  std::size_t feature_axis(std::size_t rank_without_batch) const;
  // Elements before the axis (batch included) and per input the elements from the axis on.
  std::int64_t outer(const Shape& batched) const;

  int axis_;
  Tensor y_;
};

}  // namespace mdtrain
