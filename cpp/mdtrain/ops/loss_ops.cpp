#include "mdtrain/ops/loss_ops.h"

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/loss_kernels.h"
#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/ops/device_checks.h"
#include "mdtrain/ops/cuda/loss_kernels.h"

namespace mdtrain::ops {

namespace {

void require_usable(const char* op, const char* what, const Tensor& t) {
  detail::require_usable_device("ops", op, what, t);
}

// t lives in pred's memory, where the op runs.
void require_with(const char* op, const char* what, const Tensor& t, const Tensor& pred) {
  require_usable(op, what, t);
  detail::require_same_memory("ops", op, what, t, pred, "y_pred is");
}

// Labels are validated on the host: a GPU tensor's copy (labels are one value per row: small).
Tensor on_host(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  Tensor h(t.shape(), t.dtype());
  h.copy_from(t);
  return h;
}

bool is_label_dtype(DType d) {
  return d == DType::Float32 || d == DType::Float64 || d == DType::Int32 || d == DType::Int64 || d == DType::UInt8;
}

// Checks pred (2-D float, cols >= 1), the labels/targets tensor (element count `expected`) and
// dpred; returns (rows, cols).
std::pair<std::int64_t, std::int64_t> check(const char* op, const Tensor& y, const char* y_name,
                                            std::int64_t expected_per_row, const Tensor& pred, const Tensor* dpred) {
  MDTRAIN_CHECK(pred.defined() && y.defined(), std::invalid_argument, "[ops] ", op, ": undefined tensor");
  require_usable(op, "y_pred", pred);
  require_with(op, y_name, y, pred);
  MDTRAIN_CHECK(is_floating(pred.dtype()), std::invalid_argument, "[ops] ", op,
                ": y_pred must be float32 or float64, got ", name_of(pred.dtype()));
  MDTRAIN_CHECK(is_label_dtype(y.dtype()), std::invalid_argument, "[ops] ", op, ": ", y_name, " has unsupported dtype ",
                name_of(y.dtype()));
  MDTRAIN_CHECK(pred.ndim() == 2 && pred.dim(1) >= 1, std::invalid_argument, "[ops] ", op,
                ": y_pred must be (rows, cols) with cols >= 1, got shape ", to_string(pred.shape()));
  const std::int64_t rows = pred.dim(0), cols = pred.dim(1);
  MDTRAIN_CHECK(y.numel() == rows * expected_per_row, std::invalid_argument, "[ops] ", op, ": ", y_name, " shape ",
                to_string(y.shape()), " does not match y_pred shape ", to_string(pred.shape()));
  if (dpred) {
    MDTRAIN_CHECK(dpred->defined() && dpred->shape() == pred.shape() && dpred->dtype() == pred.dtype(),
                  std::invalid_argument, "[ops] ", op, ": dpred must be ", name_of(pred.dtype()), " ",
                  to_string(pred.shape()), ", got ",
                  dpred->defined() ? cat(name_of(dpred->dtype()), " ", to_string(dpred->shape())) : "undefined");
    require_with(op, "dpred", *dpred, pred);
    MDTRAIN_CHECK(rows == 0 || !dpred->same_storage(pred), std::invalid_argument, "[ops] ", op,
                  ": dpred must not alias y_pred");
  }
  return {rows, cols};
}

// The per-row weights of a loss op (loss_ops.h: sample_weight), checked against pred's rows.
math::RowWeights row_weights(const char* op, const Tensor* sample_weight, const Tensor& pred) {
  if (sample_weight == nullptr) return {};
  const Tensor& w = *sample_weight;
  MDTRAIN_CHECK(w.defined(), std::invalid_argument, "[ops] ", op, ": sample_weight is undefined");
  require_with(op, "sample_weight", w, pred);
  MDTRAIN_CHECK(w.dtype() == DType::Float32, std::invalid_argument, "[ops] ", op,
                ": sample_weight must be float32, got ", name_of(w.dtype()));
  const std::int64_t rows = pred.dim(0), n = w.numel();
  MDTRAIN_CHECK((n == 0 && rows == 0) || (n > 0 && rows % n == 0), std::invalid_argument, "[ops] ", op,
                ": sample_weight of shape ", to_string(w.shape()), " does not cover the ", rows,
                " rows of y_pred (shape ", to_string(pred.shape()), ") in equal runs");
  return {w.data<float>(), n > 0 ? rows / n : 1};
}

// Runs kernel(L* y, T* pred, T* g) with the right types.
template <class K>
void dispatch(const Tensor& y, const Tensor& pred, Tensor* dpred, K&& kernel) {
  dispatch_floating(pred.dtype(), "ops", [&](auto ttag) {
    using T = decltype(ttag);
    dispatch_any(y.dtype(), "ops", [&](auto ltag) {
      using L = decltype(ltag);
      kernel(y.data<L>(), pred.data<T>(), dpred ? dpred->data<T>() : static_cast<T*>(nullptr));
    });
  });
}

}  // namespace

std::int64_t first_invalid_label(const Tensor& labels, std::int64_t classes, std::optional<std::int64_t> ignore_class) {
  require_usable("first_invalid_label", "labels", labels);
  MDTRAIN_CHECK(is_label_dtype(labels.dtype()), std::invalid_argument,
                "[ops] first_invalid_label: unsupported label dtype ", name_of(labels.dtype()));
  const Tensor host = on_host(labels);
  std::int64_t bad = -1;
  dispatch_any(host.dtype(), "ops", [&](auto tag) {
    using L = decltype(tag);
    bad = cpu::first_invalid_label(host.data<L>(), host.numel(), classes, ignore_class.has_value(),
                                   ignore_class.value_or(0));
  });
  return bad;
}

double element_as_double(const Tensor& t, std::int64_t index) {
  require_usable("element_as_double", "tensor", t);
  MDTRAIN_CHECK(index >= 0 && index < t.numel(), std::out_of_range, "[ops] element_as_double: index ", index,
                " out of range for shape ", to_string(t.shape()));
  const Tensor host = on_host(t.reshape({-1}).rows(index, index + 1));
  double v = 0;
  dispatch_any(host.dtype(), "ops", [&](auto tag) {
    using L = decltype(tag);
    v = static_cast<double>(host.data<L>()[0]);
  });
  return v;
}

std::int64_t count_equal(const Tensor& labels, double value) {
  require_usable("count_equal", "labels", labels);
  MDTRAIN_CHECK(is_label_dtype(labels.dtype()), std::invalid_argument, "[ops] count_equal: unsupported label dtype ",
                name_of(labels.dtype()));
  const Tensor host = on_host(labels);
  std::int64_t n = 0;
  dispatch_any(host.dtype(), "ops", [&](auto tag) {
    using L = decltype(tag);
    n = cpu::count_equal(host.data<L>(), host.numel(), value);
  });
  return n;
}

double sparse_categorical_crossentropy(const Tensor& labels, const Tensor& pred, bool from_logits,
                                       std::optional<std::int64_t> ignore_class, double grad_scale, Tensor* dpred,
                                       const Tensor* sample_weight) {
  const char* op = "sparse_categorical_crossentropy";
  auto [rows, cols] = check(op, labels, "y_true", 1, pred, dpred);
  const math::RowWeights weights = row_weights(op, sample_weight, pred);
  const std::int64_t bad = first_invalid_label(labels, cols, ignore_class);
  if (bad >= 0)
    fail<std::invalid_argument>("[ops] ", op, ": label ", element_as_double(labels, bad), " at index ", bad,
                                " is out of range for ", cols, " classes (y_pred shape ", to_string(pred.shape()), ")");
  if (!pred.device().is_cpu())
    return cuda::sparse_categorical_crossentropy(labels, pred, from_logits, ignore_class.has_value(),
                                                 ignore_class.value_or(0), grad_scale, weights, dpred);
  double sum = 0.0;
  dispatch(labels, pred, dpred, [&](const auto* y, const auto* p, auto* g) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
    sum = cpu::sparse_xent(y, p, rows, cols, from_logits, ignore_class.has_value(), ignore_class.value_or(0),
                           static_cast<T>(grad_scale), weights, g);
  });
  return sum;
}

double categorical_crossentropy(const Tensor& target, const Tensor& pred, bool from_logits, double label_smoothing,
                                double grad_scale, Tensor* dpred, const Tensor* sample_weight) {
  const char* op = "categorical_crossentropy";
  auto [rows, cols] = check(op, target, "y_true", pred.ndim() == 2 ? pred.dim(1) : 0, pred, dpred);
  const math::RowWeights weights = row_weights(op, sample_weight, pred);
  if (!pred.device().is_cpu())
    return cuda::categorical_crossentropy(target, pred, from_logits, label_smoothing, grad_scale, weights, dpred);
  double sum = 0.0;
  dispatch(target, pred, dpred, [&](const auto* y, const auto* p, auto* g) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
    sum = cpu::dense_xent(y, p, rows, cols, from_logits, static_cast<T>(label_smoothing), static_cast<T>(grad_scale),
                          weights, g);
  });
  return sum;
}

double binary_crossentropy(const Tensor& target, const Tensor& pred, bool from_logits, double label_smoothing,
                           double grad_scale, Tensor* dpred, const Tensor* sample_weight) {
  const char* op = "binary_crossentropy";
  auto [rows, cols] = check(op, target, "y_true", pred.ndim() == 2 ? pred.dim(1) : 0, pred, dpred);
  const math::RowWeights weights = row_weights(op, sample_weight, pred);
  if (!pred.device().is_cpu())
    return cuda::binary_crossentropy(target, pred, from_logits, label_smoothing, grad_scale, weights, dpred);
  double sum = 0.0;
  dispatch(target, pred, dpred, [&](const auto* y, const auto* p, auto* g) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
    sum = cpu::binary_xent(y, p, rows, cols, from_logits, static_cast<T>(label_smoothing), static_cast<T>(grad_scale),
                           weights, g);
  });
  return sum;
}

double mean_squared_error(const Tensor& target, const Tensor& pred, double grad_scale, Tensor* dpred,
                          const Tensor* sample_weight) {
  const char* op = "mean_squared_error";
  auto [rows, cols] = check(op, target, "y_true", pred.ndim() == 2 ? pred.dim(1) : 0, pred, dpred);
  const math::RowWeights weights = row_weights(op, sample_weight, pred);
  if (!pred.device().is_cpu()) return cuda::mean_squared_error(target, pred, grad_scale, weights, dpred);
  double sum = 0.0;
  dispatch(target, pred, dpred, [&](const auto* y, const auto* p, auto* g) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
    sum = cpu::squared_error(y, p, rows, cols, static_cast<T>(grad_scale), weights, g);
  });
  return sum;
}

double mean_absolute_error(const Tensor& target, const Tensor& pred, double grad_scale, Tensor* dpred,
                           const Tensor* sample_weight) {
  const char* op = "mean_absolute_error";
  auto [rows, cols] = check(op, target, "y_true", pred.ndim() == 2 ? pred.dim(1) : 0, pred, dpred);
  const math::RowWeights weights = row_weights(op, sample_weight, pred);
  if (!pred.device().is_cpu()) return cuda::mean_absolute_error(target, pred, grad_scale, weights, dpred);
  double sum = 0.0;
  dispatch(target, pred, dpred, [&](const auto* y, const auto* p, auto* g) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(p)>>;
    sum = cpu::absolute_error(y, p, rows, cols, static_cast<T>(grad_scale), weights, g);
  });
  return sum;
}

double sparse_categorical_matches(const Tensor& labels, const Tensor& pred) {
  auto [rows, cols] = check("sparse_categorical_matches", labels, "y_true", 1, pred, nullptr);
  if (!pred.device().is_cpu()) return cuda::sparse_categorical_matches(labels, pred);
  double n = 0.0;
  dispatch(labels, pred, nullptr,
           [&](const auto* y, const auto* p, auto*) { n = cpu::sparse_argmax_matches(y, p, rows, cols); });
  return n;
}

double categorical_matches(const Tensor& target, const Tensor& pred) {
  auto [rows, cols] = check("categorical_matches", target, "y_true", pred.ndim() == 2 ? pred.dim(1) : 0, pred, nullptr);
  if (!pred.device().is_cpu()) return cuda::categorical_matches(target, pred);
  double n = 0.0;
  dispatch(target, pred, nullptr,
           [&](const auto* y, const auto* p, auto*) { n = cpu::argmax_matches(y, p, rows, cols); });
  return n;
}

double sparse_top_k_matches(const Tensor& labels, const Tensor& pred, std::int64_t k) {
  auto [rows, cols] = check("sparse_top_k_matches", labels, "y_true", 1, pred, nullptr);
  MDTRAIN_CHECK(k >= 1, std::invalid_argument, "[ops] sparse_top_k_matches: k must be >= 1, got ", k);
  if (!pred.device().is_cpu()) return cuda::sparse_top_k_matches(labels, pred, k);
  double n = 0.0;
  dispatch(labels, pred, nullptr,
           [&](const auto* y, const auto* p, auto*) { n = cpu::top_k_matches(y, p, rows, cols, k); });
  return n;
}

double binary_matches(const Tensor& target, const Tensor& pred, double threshold) {
  auto [rows, cols] = check("binary_matches", target, "y_true", pred.ndim() == 2 ? pred.dim(1) : 0, pred, nullptr);
  if (!pred.device().is_cpu()) return cuda::binary_matches(target, pred, threshold);
  double n = 0.0;
  dispatch(target, pred, nullptr,
           [&](const auto* y, const auto* p, auto*) { n = cpu::threshold_matches(y, p, rows * cols, threshold); });
  return n;
}

}  // namespace mdtrain::ops
