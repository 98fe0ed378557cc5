#pragma once
// Argument checks shared by losses (nn/) and metrics (model/): both take (y_true, y_pred) with
// the same dtypes and batch layout. `prefix` is a callable so that messages (and their
// allocations) are only built on failure: these run every step.
#include <string>

#include "mdtrain/core/errors.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain::targets {

inline bool is_label_dtype(DType d) {
  return d == DType::Float32 || d == DType::Float64 || d == DType::Int32 || d == DType::Int64 || d == DType::UInt8;
}

inline std::string shapes(const Tensor& y_true, const Tensor& y_pred) {
  return cat("y_true shape ", to_string(y_true.shape()), ", y_pred shape ", to_string(y_pred.shape()));
}

// Dtypes, a batch axis and equal batch sizes.
template <class Prefix>
void check_common(const Prefix& prefix, const Tensor& y_true, const Tensor& y_pred) {
  MDTRAIN_CHECK(y_true.defined() && y_pred.defined(), std::invalid_argument, prefix(),
                y_true.defined() ? "y_pred" : "y_true", " is an undefined tensor");
  MDTRAIN_CHECK(is_floating(y_pred.dtype()), std::invalid_argument, prefix(), "y_pred must be float32 or float64, got ",
                name_of(y_pred.dtype()), " (", shapes(y_true, y_pred), ")");
  MDTRAIN_CHECK(is_label_dtype(y_true.dtype()), std::invalid_argument, prefix(), "y_true has unsupported dtype ",
                name_of(y_true.dtype()), " (", shapes(y_true, y_pred), ")");
  MDTRAIN_CHECK(y_pred.ndim() >= 1 && y_true.ndim() >= 1, std::invalid_argument, prefix(),
                "y_true and y_pred need a batch axis (", shapes(y_true, y_pred), ")");
  MDTRAIN_CHECK(y_true.dim(0) == y_pred.dim(0), std::invalid_argument, prefix(), "y_true has batch size ",
                y_true.dim(0), " but y_pred has ", y_pred.dim(0), " (", shapes(y_true, y_pred), ")");
}

}  // namespace mdtrain::targets
