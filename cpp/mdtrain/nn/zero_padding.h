#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/strided_view_layer.h"

namespace mdtrain {

// keras.layers.ZeroPadding1D / ZeroPadding2D on channels_last inputs (batch, *spatial, channels):
// padding[d] = (before, after) zeros added along spatial dimension d. The input is copied into
// the zeroed output at an offset; its gradient is that window of the output's.
class ZeroPadding : public StridedViewLayer {
 public:
  // spatial_dims 1 (ZeroPadding1D) or 2 (ZeroPadding2D); padding: one (before, after) pair per
  // spatial dimension, each entry >= 0.
  ZeroPadding(std::string name, std::vector<std::vector<std::int64_t>> padding,
              std::string data_format = "channels_last");
  std::string class_name() const override { return padding_.size() == 1 ? "ZeroPadding1D" : "ZeroPadding2D"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  std::unique_ptr<Layer> clone() const override;
  Json config() const override;
  // The layer of a Keras ZeroPadding1D ({"padding": n or [l, r]}) or ZeroPadding2D config
  // ({"padding": n, [h, w] or [[t, b], [l, r]]}), with its "data_format".
  static std::unique_ptr<Layer> from_config_1d(const Json& config);
  static std::unique_ptr<Layer> from_config_2d(const Json& config);
  const std::vector<std::vector<std::int64_t>>& padding() const { return padding_; }

 protected:
  ops::ViewPlan forward_plan(std::int64_t batch) const override;
  ops::ViewPlan backward_plan(std::int64_t batch) const override;
  bool forward_fills_zeros() const override { return true; }

 private:
  std::vector<std::vector<std::int64_t>> padding_;
  std::string data_format_;
};

}  // namespace mdtrain
