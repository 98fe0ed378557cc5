#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/nn/merge_layer.h"

namespace mdtrain {

// keras.layers.Dot(axes, normalize=False): the batched dot product of two inputs over one axis of
// each (Keras's batch_dot). `axes` is an int (the same axis of both) or a pair, counted with the
// batch axis (negative from the end); the batch axis cannot be one. The output is the first
// input's other axes then the second's ((batch, 1) when none is left). normalize: each input is
// first L2-normalized along its axis as keras.ops.normalize does (x * min(rsqrt(sum x^2), 1e7)),
// so the output is the cosine proximity. Masks end here (Keras's compute_mask returns None).
class Dot final : public MergeLayer {
 public:
  // `axes` holds one entry (an int) or two (a pair), as the Keras config has it.
  Dot(std::string name, std::vector<int> axes, bool normalize);
  std::string class_name() const override { return "Dot"; }
  const std::vector<int>& axes() const { return axes_; }
  bool normalize() const { return normalize_; }
  bool keeps_masks() const override { return false; }
  Shape merged_shape(const std::vector<Shape>& input_shapes) const override;
  Tensor forward_inputs(const std::vector<Tensor>& x) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy) override;
  std::unique_ptr<Layer> clone() const override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&y_, &xn_[0], &xn_[1], &inv_[0], &inv_[1]}); }
  Json config() const override;  // Layer's fields, "axes" (an int or a pair) and "normalize"
  static std::unique_ptr<Layer> from_config(const Json& config);

 protected:
  void after_build() override;

 private:
  // The axes of both inputs without the batch axis, resolved as Keras resolves them; throws
  // naming the layer when one is the batch axis or out of range.
  std::pair<std::size_t, std::size_t> feature_axes(const Shape& a, const Shape& b) const;

  // One input seen as (batch, rest, k): the offset in its row of each element of `rest` (the
  // other axes in order) and the stride of the dot axis.
  struct Operand {
    std::vector<std::int64_t> offsets;
    std::int64_t stride = 1, size = 0;
  };

  std::vector<int> axes_;
  bool normalize_;
  Operand in_[2];
  Tensor y_;
  std::vector<Tensor> x_;  // the last forward's inputs
  Tensor xn_[2];           // normalize: the normalized inputs, and their inverse norms per row
  Tensor inv_[2];
};

}  // namespace mdtrain
