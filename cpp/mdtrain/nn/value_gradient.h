#pragma once
// The gradient of one value of a layer graph in backward, summed over the layers that read it
// (LayerGraph and GraphSegment run the same backward).
#include "mdtrain/core/tensor.h"

namespace mdtrain {

// Adds `g` into `grad`, the gradient of a value `readers` layers read: a value read once takes
// `g` itself; the first of several gradients is copied into `buffer` (the value's own storage,
// kept between steps) and the next ones are added to it in the order they come (ops::add_into).
void accumulate_value_gradient(Tensor& grad, Tensor& buffer, const Tensor& g, int readers);

}  // namespace mdtrain
