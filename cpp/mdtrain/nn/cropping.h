#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/strided_view_layer.h"

namespace mdtrain {

// keras.layers.Cropping1D / Cropping2D on channels_last inputs (batch, *spatial, channels):
// cropping[d] = (before, after) elements cut off spatial dimension d. The output is a window of
// the input read at an offset; the gradient is the output's copied back into a zeroed input.
class Cropping : public StridedViewLayer {
 public:
  // spatial_dims 1 (Cropping1D, no data_format in Keras) or 2 (Cropping2D).
  Cropping(std::string name, std::vector<std::vector<std::int64_t>> cropping,
           std::string data_format = "channels_last");
  std::string class_name() const override { return cropping_.size() == 1 ? "Cropping1D" : "Cropping2D"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  std::unique_ptr<Layer> clone() const override;
  Json config() const override;
  // The layer of a Keras Cropping1D ({"cropping": n or [l, r]}) or Cropping2D config
  // ({"cropping": n, [h, w] or [[t, b], [l, r]], "data_format"}).
  static std::unique_ptr<Layer> from_config_1d(const Json& config);
  static std::unique_ptr<Layer> from_config_2d(const Json& config);
  const std::vector<std::vector<std::int64_t>>& cropping() const { return cropping_; }

 protected:
  ops::ViewPlan forward_plan(std::int64_t batch) const override;
  ops::ViewPlan backward_plan(std::int64_t batch) const override;
  bool backward_fills_zeros() const override { return true; }

 private:
  std::vector<std::vector<std::int64_t>> cropping_;
  std::string data_format_;
};

}  // namespace mdtrain
