#include "mdtrain/nn/tensor_parallel/dim_slices.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/ops/strided_copy.h"

namespace mdtrain {

namespace {

struct PieceGeometry {
  std::int64_t outer = 1, whole_dim = 0, piece_dim = 0, inner = 1;
};

PieceGeometry geometry(const Tensor& whole, const Tensor& part, int dim, int k, int n) {
  MDTRAIN_CHECK(whole.dtype() == part.dtype() && dim >= 0 && dim < whole.ndim() && whole.ndim() == part.ndim() &&
                    n >= 1 && k >= 0 && k < n && whole.dim(dim) % n == 0,
                std::invalid_argument, "[tensor_parallel] piece ", k, " of ", n, " along dimension ", dim, " of ",
                to_string(whole.shape()), " does not fit ", to_string(part.shape()));
  PieceGeometry g;
  for (int a = 0; a < whole.ndim(); ++a) {
    if (a < dim) g.outer *= whole.dim(a);
    if (a > dim) g.inner *= whole.dim(a);
    const std::int64_t expected = a == dim ? whole.dim(a) / n : whole.dim(a);
    MDTRAIN_CHECK(part.dim(a) == expected, std::invalid_argument, "[tensor_parallel] piece ", k, " of ", n,
                  " along dimension ", dim, " of ", to_string(whole.shape()), " does not fit ",
                  to_string(part.shape()));
  }
  g.whole_dim = whole.dim(dim);
  g.piece_dim = g.whole_dim / n;
  return g;
}

}  // namespace

void copy_piece_out(const Tensor& whole, int dim, int k, int n, Tensor& part) {
  const PieceGeometry g = geometry(whole, part, dim, k, n);
  const std::int64_t run = g.piece_dim * g.inner;
  ops::copy_runs(whole, k * run, g.whole_dim * g.inner, part, 0, run, g.outer, run);
}

void copy_piece_in(const Tensor& part, int dim, int k, int n, Tensor& whole) {
  const PieceGeometry g = geometry(whole, part, dim, k, n);
  const std::int64_t run = g.piece_dim * g.inner;
  ops::copy_runs(part, 0, run, whole, k * run, g.whole_dim * g.inner, g.outer, run);
}

void interleave_last_dim(const Tensor& blocks, int n, Tensor& whole) {
  MDTRAIN_CHECK(blocks.numel() == whole.numel() && blocks.dtype() == whole.dtype() && whole.ndim() >= 1 &&
                    whole.dim(whole.ndim() - 1) % n == 0,
                std::invalid_argument, "[tensor_parallel] ", n, " gathered pieces of ", blocks.numel(),
                " elements do not make ", to_string(whole.shape()));
  const std::int64_t last = whole.dim(whole.ndim() - 1), piece = last / n, rows = last ? whole.numel() / last : 0;
  // Block k holds `rows` runs of `piece` elements, one after another; in the whole they are
  // columns [k * piece, (k + 1) * piece) of every row.
  for (int k = 0; k < n; ++k) ops::copy_runs(blocks, k * rows * piece, piece, whole, k * piece, last, rows, piece);
}

}  // namespace mdtrain
