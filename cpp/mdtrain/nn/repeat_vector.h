#pragma once
#include <memory>
#include <string>

#include "mdtrain/nn/strided_view_layer.h"

namespace mdtrain {

// keras.layers.RepeatVector(n): (batch, features) → (batch, n, features), the row read n times
// (stride 0); its gradient is the sum over the n copies.
class RepeatVector : public StridedViewLayer {
 public:
  RepeatVector(std::string name, std::int64_t n);
  std::string class_name() const override { return "RepeatVector"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  std::unique_ptr<Layer> clone() const override;
  Json config() const override;
  // The layer of a Keras config ({"name", "n"}).
  static std::unique_ptr<Layer> from_config(const Json& config);
  std::int64_t n() const { return n_; }

 protected:
  ops::ViewPlan forward_plan(std::int64_t batch) const override;
  ops::ViewPlan backward_plan(std::int64_t batch) const override;

 private:
  std::int64_t n_;
};

}  // namespace mdtrain
