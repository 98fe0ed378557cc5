#include "mdtrain/nn/tensor_parallel/dim_slices.h"

#include <cstring>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {

struct PieceGeometry {
  std::int64_t outer = 1, whole_dim = 0, piece_dim = 0, inner = 1;
  std::size_t elem = 0;
};

PieceGeometry geometry(const Tensor& whole, const Tensor& part, int dim, int k, int n) {
  MDTRAIN_CHECK(whole.device().is_cpu() && part.device().is_cpu(), std::invalid_argument,
                "[tensor_parallel] pieces of tensors are cut in host memory");
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
  g.elem = size_of(whole.dtype());
  return g;
}

}  // namespace

void copy_piece_out(const Tensor& whole, int dim, int k, int n, Tensor& part) {
  const PieceGeometry g = geometry(whole, part, dim, k, n);
  const auto* src = static_cast<const char*>(whole.raw());
  auto* dst = static_cast<char*>(part.raw());
  const std::size_t run = static_cast<std::size_t>(g.piece_dim * g.inner) * g.elem;
  for (std::int64_t o = 0; o < g.outer; ++o)
    std::memcpy(dst + static_cast<std::size_t>(o) * run,
                src + static_cast<std::size_t>((o * g.whole_dim + k * g.piece_dim) * g.inner) * g.elem, run);
}

void copy_piece_in(const Tensor& part, int dim, int k, int n, Tensor& whole) {
  const PieceGeometry g = geometry(whole, part, dim, k, n);
  const auto* src = static_cast<const char*>(part.raw());
  auto* dst = static_cast<char*>(whole.raw());
  const std::size_t run = static_cast<std::size_t>(g.piece_dim * g.inner) * g.elem;
  for (std::int64_t o = 0; o < g.outer; ++o)
    std::memcpy(dst + static_cast<std::size_t>((o * g.whole_dim + k * g.piece_dim) * g.inner) * g.elem,
                src + static_cast<std::size_t>(o) * run, run);
}

void interleave_last_dim(const Tensor& blocks, int n, Tensor& whole) {
  MDTRAIN_CHECK(blocks.numel() == whole.numel() && blocks.dtype() == whole.dtype() && whole.ndim() >= 1 &&
                    whole.dim(whole.ndim() - 1) % n == 0,
                std::invalid_argument, "[tensor_parallel] ", n, " gathered pieces of ", blocks.numel(),
                " elements do not make ", to_string(whole.shape()));
  const std::int64_t last = whole.dim(whole.ndim() - 1), piece = last / n, rows = last ? whole.numel() / last : 0;
  const std::size_t elem = size_of(whole.dtype()), run = static_cast<std::size_t>(piece) * elem;
  const auto* src = static_cast<const char*>(blocks.raw());
  auto* dst = static_cast<char*>(whole.raw());
  for (int k = 0; k < n; ++k)
    for (std::int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + static_cast<std::size_t>(r * last + k * piece) * elem,
                  src + static_cast<std::size_t>(k * rows + r) * run, run);
}

}  // namespace mdtrain
