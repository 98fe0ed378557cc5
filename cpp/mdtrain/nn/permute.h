#pragma once
#include <memory>
#include <string>

#include "mdtrain/nn/strided_view_layer.h"

namespace mdtrain {

// keras.layers.Permute(dims): the input's non-batch axes reordered, output axis i being input axis
// dims[i] (1-based, the batch is 0). A transpose: the output read at permuted input strides.
class Permute : public StridedViewLayer {
 public:
  Permute(std::string name, std::vector<std::int64_t> dims);
  std::string class_name() const override { return "Permute"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  std::unique_ptr<Layer> clone() const override;
  Json config() const override;
  // The layer of a Keras config ({"name", "dims"}). The one way layers are made from Python and
  // from model files.
  static std::unique_ptr<Layer> from_config(const Json& config);
  const std::vector<std::int64_t>& dims() const { return dims_; }

 protected:
  ops::ViewPlan forward_plan(std::int64_t batch) const override;
  ops::ViewPlan backward_plan(std::int64_t batch) const override;

 private:
  std::vector<std::int64_t> dims_;
};

}  // namespace mdtrain
