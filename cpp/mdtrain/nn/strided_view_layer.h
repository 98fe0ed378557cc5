#pragma once
// The base of the layers that only move data (Permute, RepeatVector, ZeroPadding1D/2D,
// Cropping1D/2D, UpSampling1D/2D): each says, for a batch, which ops::strided_view plan makes its
// output from its input and which makes the input's gradient from the output's; this class runs
// them (on the host or a GPU) and owns the buffers.
#include <cstdint>
#include <string>

#include "mdtrain/nn/layer.h"
#include "mdtrain/ops/strided_view.h"

namespace mdtrain {

class StridedViewLayer : public Layer {
 public:
  bool has_cuda_kernels() const override { return true; }  // ops::strided_view and Tensor::fill
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_input_grad) override;
  std::int64_t held_activation_bytes() const override { return bytes_of({&y_, &dx_}); }

 protected:
  using Layer::Layer;
  // Plans over whole batches of `batch` rows of input_shape_ / output_shape_ (both contiguous).
  virtual ops::ViewPlan forward_plan(std::int64_t batch) const = 0;
  virtual ops::ViewPlan backward_plan(std::int64_t batch) const = 0;
  // True when the plan writes only part of its output (padding's forward, cropping's backward):
  // the rest is zero.
  virtual bool forward_fills_zeros() const { return false; }
  virtual bool backward_fills_zeros() const { return false; }

 protected:
  // The output and input-gradient buffers, and the batch of the last forward (shared with
  // UpSampling's bilinear path, which computes into them with its own op).
  Tensor y_, dx_;
  std::int64_t last_batch_ = 0;
};

// Keras's InputSpec(ndim) error unless input_shape (batch excluded) has ndim - 1 entries.
void check_input_ndim(const std::string& layer, const Shape& input_shape, std::size_t ndim);
// Per spatial dimension (before, after) pairs of a Keras config (padding, cropping): for one
// dimension an int n (n, n) or a pair; for two an int, a pair of ints (symmetric) or a pair of
// pairs.
std::vector<std::vector<std::int64_t>> pairs_from_json(const Json& value, std::size_t dims);
// ZeroPadding's and Cropping's check: one (before, after) pair of integers >= 0 per spatial
// dimension (1 or 2 of them); throws std::invalid_argument naming the class, layer and argument.
void check_pairs_arg(const char* cls, const std::string& layer, const char* arg,
                     const std::vector<std::vector<std::int64_t>>& pairs);
// The `before` entry of each pair: where the smaller tensor's window starts in the larger one.
Shape before_offsets(const std::vector<std::vector<std::int64_t>>& pairs);
// "(1, 2)" or "((1, 2), (0, 0))", as Python prints them.
std::string pairs_string(const std::vector<std::vector<std::int64_t>>& pairs);
Json pairs_to_json(const std::vector<std::vector<std::int64_t>>& pairs);
// Row-major strides of (batch, *shape) (the batch's stride is one row's size, whatever the batch).
std::vector<std::int64_t> contiguous_strides(const Shape& shape);
// The plan that copies every element of (batch, *small) into (batch, *big) at `offset` per
// dimension of small/big (rank of small; the batch has none), or, with `from_big`, reads that
// window of big into small: padding's and cropping's forward and backward.
ops::ViewPlan window_plan(std::int64_t batch, const Shape& small, const Shape& big, const Shape& offset, bool from_big);
// UpSampling's plans for channels_last inputs (batch, *spatial, channels) repeated size[d] times
// along spatial dimension d: the copy (forward) or the sum over the repeats (backward, reading
// the output's gradient).
ops::ViewPlan repeat_plan(std::int64_t batch, const Shape& input_shape, const Shape& size, bool backward);

}  // namespace mdtrain
