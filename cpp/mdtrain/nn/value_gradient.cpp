#include "mdtrain/nn/value_gradient.h"

#include "mdtrain/nn/layer.h"
#include "mdtrain/ops/accumulate.h"

namespace mdtrain {

void accumulate_value_gradient(Tensor& grad, Tensor& buffer, const Tensor& g, int readers) {
  if (readers == 1) {
    grad = g;
    return;
  }
  if (!grad.defined()) {
    ensure_buffer(buffer, g.shape(), g.dtype(), g.device());
    buffer.copy_from(g);
    grad = buffer;
    return;
  }
  ops::add_into(grad, g);
}

}  // namespace mdtrain
