#pragma once
// One contiguous range of an optimizer update: `size` elements of a value, its gradient and each
// of its slots, laid out alike. The optimizer ops (ops/optimizer_ops.h) take a list of them, so
// one call updates a whole model; the host and GPU kernels read the same description.
#include <cstdint>
#include <vector>

#include "mdtrain/core/dtype.h"

namespace mdtrain::ops {

struct UpdateSegment {
  void* value = nullptr;
  const void* grad = nullptr;
  void* slots[3] = {nullptr, nullptr, nullptr};  // in the optimizer's slot_specs() order
  std::int64_t size = 0;
  double grad_scale = 1.0;  // clipnorm / global_clipnorm factor (1 when off)
  double decay = 0.0;       // weight_decay * learning_rate (0 when off for this parameter)
};

// Joins neighbours whose value, grad and first `slot_count` slots each continue where the previous
// segment's end (elements of `dtype`), and whose grad_scale and decay are equal: the same elements
// with the same scalars, so the same bits, in fewer and longer passes. Parameters packed into one
// buffer (LayerStack::packed_values/packed_grads, with the optimizer's packed slots) become a
// single segment.
std::vector<UpdateSegment> merge_contiguous(const std::vector<UpdateSegment>& segments, DType dtype, int slot_count);

}  // namespace mdtrain::ops
