#include "mdtrain/nn/layer.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/strategy/step_executor.h"

namespace mdtrain {

void gather_global_batch(const GlobalBatch& batch, Tensor& x_out, Tensor& y_out, Tensor* w_out) {
  Shape xs = batch.x.shape(), ys = batch.y.shape();
  xs[0] = batch.count;
  ys[0] = batch.count;
  ensure_buffer(x_out, xs, batch.x.dtype());
  ensure_buffer(y_out, ys, batch.y.dtype());
  ops::gather_rows(batch.x, batch.indices, batch.count, x_out);
  ops::gather_rows(batch.y, batch.indices, batch.count, y_out);
  if (w_out != nullptr && batch.sample_weight != nullptr) {
    ensure_buffer(*w_out, {batch.count}, DType::Float32);
    ops::gather_rows(*batch.sample_weight, batch.indices, batch.count, *w_out);
  }
}

}  // namespace mdtrain
