#pragma once
#include <memory>
#include <string>

#include "mdtrain/nn/strided_view_layer.h"

namespace mdtrain {

// keras.layers.UpSampling1D(size) / UpSampling2D(size, interpolation="nearest") on channels_last
// inputs (batch, *spatial, channels): each element repeated size[d] times along spatial
// dimension d (stride-0 reads); the gradient sums each element's repeats. UpSampling2D also
// interpolates "bilinear" (ops::resize_bilinear, TF's half-pixel form).
class UpSampling : public StridedViewLayer {
 public:
  // size: one entry > 0 per spatial dimension (1: UpSampling1D, 2: UpSampling2D).
  UpSampling(std::string name, Shape size, std::string data_format = "channels_last",
             std::string interpolation = "nearest");
  std::string class_name() const override { return size_.size() == 1 ? "UpSampling1D" : "UpSampling2D"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::unique_ptr<Layer> clone() const override;
  Json config() const override;
  // The layer of a Keras UpSampling1D ({"size": n}) or UpSampling2D config ({"size": n or [h, w],
  // "data_format", "interpolation"}).
  static std::unique_ptr<Layer> from_config_1d(const Json& config);
  static std::unique_ptr<Layer> from_config_2d(const Json& config);
  const Shape& size() const { return size_; }

 protected:
  ops::ViewPlan forward_plan(std::int64_t batch) const override;
  ops::ViewPlan backward_plan(std::int64_t batch) const override;

 private:
  Shape size_;
  std::string data_format_;
  std::string interpolation_;
};

}  // namespace mdtrain
