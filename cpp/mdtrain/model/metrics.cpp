#include <algorithm>
#include <cctype>

#include "mdtrain/nn/target_checks.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/model/metric.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/ops/loss_ops.h"

namespace mdtrain {

namespace {

using targets::check_common;
using targets::is_label_dtype;
using targets::shapes;

// For metrics whose y_true holds one class id per position of y_pred without its class axis.
// Returns (rows, classes).
template <class Prefix>
std::pair<std::int64_t, std::int64_t> sparse_layout(const Prefix& prefix, const Tensor& y_true, const Tensor& y_pred) {
  check_common(prefix, y_true, y_pred);
  MDTRAIN_CHECK(y_pred.ndim() >= 2 && y_pred.shape().back() > 0, std::invalid_argument, prefix(),
                "y_pred must be shaped (batch, ..., classes) (", shapes(y_true, y_pred), ")");
  MDTRAIN_CHECK(is_sparse_label_shape(y_true.shape(), y_pred.shape()), std::invalid_argument, prefix(),
                "y_true must hold one class id per sample (", shapes(y_true, y_pred), ")");
  const std::int64_t classes = y_pred.shape().back();
  return {y_pred.numel() / classes, classes};
}

// For metrics comparing y_true and y_pred position by position (after Keras's squeeze/expand of
// a trailing 1). Returns (rows, cols) with cols the last axis.
template <class Prefix>
std::pair<std::int64_t, std::int64_t> dense_layout(const Prefix& prefix, const Tensor& y_true, const Tensor& y_pred) {
  check_common(prefix, y_true, y_pred);
  std::int64_t rows = 0, cols = 0;
  MDTRAIN_CHECK(same_shape_layout(y_true.shape(), y_pred.shape(), &rows, &cols), std::invalid_argument, prefix(),
                "y_true shape ", to_string(y_true.shape()), " is not compatible with y_pred shape ",
                to_string(y_pred.shape()), ": expected equal shapes");
  MDTRAIN_CHECK(cols > 0, std::invalid_argument, prefix(), "the last axis of y_pred is empty (", shapes(y_true, y_pred),
                ")");
  return {rows, cols};
}

// t itself when it is already (rows, cols), else a reshaped view kept in `storage`.
const Tensor& as_matrix(const Tensor& t, std::int64_t rows, std::int64_t cols, Tensor& storage) {
  if (t.ndim() == 2 && t.dim(0) == rows && t.dim(1) == cols) return t;
  return storage = t.reshape({rows, cols});
}

enum class Kind { SparseCategorical, Categorical, Binary, SparseTopK, MeanSquared, MeanAbsolute };

struct Alias {
  const char* key;
  Kind kind;
};

// Keras's identifiers (keras.metrics.get): function names, class names and the legacy aliases.
constexpr Alias kAliases[] = {
    {"sparse_categorical_accuracy", Kind::SparseCategorical},
    {"SparseCategoricalAccuracy", Kind::SparseCategorical},
    {"categorical_accuracy", Kind::Categorical},
    {"CategoricalAccuracy", Kind::Categorical},
    {"binary_accuracy", Kind::Binary},
    {"BinaryAccuracy", Kind::Binary},
    {"sparse_top_k_categorical_accuracy", Kind::SparseTopK},
    {"SparseTopKCategoricalAccuracy", Kind::SparseTopK},
    {"mean_squared_error", Kind::MeanSquared},
    {"MeanSquaredError", Kind::MeanSquared},
    {"mse", Kind::MeanSquared},
    {"MSE", Kind::MeanSquared},
    {"mean_absolute_error", Kind::MeanAbsolute},
    {"MeanAbsoluteError", Kind::MeanAbsolute},
    {"mae", Kind::MeanAbsolute},
    {"MAE", Kind::MeanAbsolute},
};

std::unique_ptr<Metric> build(Kind kind, const std::string& name) {
  switch (kind) {
    case Kind::SparseCategorical: return std::make_unique<metrics::SparseCategoricalAccuracy>(name);
    case Kind::Categorical: return std::make_unique<metrics::CategoricalAccuracy>(name);
    case Kind::Binary: return std::make_unique<metrics::BinaryAccuracy>(name);
    case Kind::SparseTopK: return std::make_unique<metrics::SparseTopKCategoricalAccuracy>(name);
    case Kind::MeanSquared: return std::make_unique<metrics::MeanSquaredError>(name);
    case Kind::MeanAbsolute: return std::make_unique<metrics::MeanAbsoluteError>(name);
  }
  fail<std::logic_error>("[metric] unhandled metric kind");
}

}  // namespace

// ---- Metric / Mean ------------------------------------------------------------------------------

Metric::~Metric() = default;

std::string Metric::prefix() const { return cat("[metric] ", name(), ": "); }

void Metric::set_totals(const std::vector<double>& totals) {
  MDTRAIN_CHECK(totals.size() == 2, std::invalid_argument, prefix(), "set_totals expects {total, count}, got ",
                totals.size(), " numbers");
  total_ = totals[0];
  count_ = totals[1];
}

void Metric::accumulate_samples(double sum, std::int64_t positions, std::int64_t batch) {
  if (batch == 0 || positions == 0) return;
  accumulate(sum / static_cast<double>(positions / batch), static_cast<double>(batch));
}

Json Metric::config() const {
  Json j = Json::object();
  j.set("name", name());
  j.set("dtype", "float32");
  return j;
}

void Mean::update(const Tensor& /*y_true*/, const Tensor& values) {
  MDTRAIN_CHECK(values.defined() && is_floating(values.dtype()), std::invalid_argument, prefix(),
                "values must be a float32 or float64 tensor");
  MDTRAIN_CHECK(values.device().is_cpu(), std::invalid_argument, "[ops] ", name(), ": values are on ",
                values.device().to_string(), "; CUDA tensors are not supported yet");
  const std::int64_t batch = values.ndim() == 0 ? 1 : values.dim(0);
  if (batch == 0) return;
  double sum = 0.0;
  const std::int64_t n = values.numel();
  if (values.dtype() == DType::Float32) {
    const float* v = values.data<float>();
    for (std::int64_t i = 0; i < n; ++i) sum += v[i];
  } else {
    const double* v = values.data<double>();
    for (std::int64_t i = 0; i < n; ++i) sum += v[i];
  }
  // (batch, 0) values add nothing (Keras's mean of nothing would be NaN).
  accumulate_samples(sum, n, batch);
}

// ---- make_metric --------------------------------------------------------------------------------

std::unique_ptr<Metric> make_metric(const std::string& name, const Loss* /*loss*/, const Shape& y_true_shape,
                                    const Shape& y_pred_shape) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "accuracy" || lower == "acc") {
    MDTRAIN_CHECK(!y_true_shape.empty() && !y_pred_shape.empty(), std::invalid_argument, "[metric] ", name,
                  ": cannot resolve accuracy for y_true shape ", to_string(y_true_shape), " and y_pred shape ",
                  to_string(y_pred_shape));
    const bool is_binary = y_pred_shape.back() == 1;
    const bool is_sparse =
        y_true_shape.size() < y_pred_shape.size() || (y_true_shape.back() == 1 && y_pred_shape.back() > 1);
    if (is_binary) return std::make_unique<metrics::BinaryAccuracy>(name);
    if (is_sparse) return std::make_unique<metrics::SparseCategoricalAccuracy>(name);
    return std::make_unique<metrics::CategoricalAccuracy>(name);
  }
  for (const auto& a : kAliases)
    if (name == a.key) return build(a.kind, name);
  std::string known = "'accuracy', 'acc'";
  for (const auto& a : kAliases) known += cat(", '", a.key, "'");
  fail<std::invalid_argument>("[metric] unknown metric '", name, "'; known metrics: ", known);
}

namespace metrics {

void SparseCategoricalAccuracy::update(const Tensor& y_true, const Tensor& y_pred) {
  auto [rows, classes] = sparse_layout([this] { return prefix(); }, y_true, y_pred);
  if (rows == 0) return;
  Tensor view;
  const double matches = ops::sparse_categorical_matches(y_true, as_matrix(y_pred, rows, classes, view));
  accumulate_samples(matches, rows, y_pred.dim(0));
}

void CategoricalAccuracy::update(const Tensor& y_true, const Tensor& y_pred) {
  check_common([this] { return prefix(); }, y_true, y_pred);
  MDTRAIN_CHECK(y_pred.ndim() >= 2 && y_true.shape() == y_pred.shape() && y_pred.shape().back() > 0,
                std::invalid_argument, prefix(), "y_true must be one-hot targets shaped like y_pred (",
                shapes(y_true, y_pred), ")",
                y_true.ndim() + 1 == y_pred.ndim() ? "; for integer class ids use sparse_categorical_accuracy" : "");
  const std::int64_t classes = y_pred.shape().back(), rows = y_pred.numel() / classes;
  if (rows == 0) return;
  Tensor tv, pv;
  const double matches =
      ops::categorical_matches(as_matrix(y_true, rows, classes, tv), as_matrix(y_pred, rows, classes, pv));
  accumulate_samples(matches, rows, y_pred.dim(0));
}

BinaryAccuracy::BinaryAccuracy(std::string name, double threshold) : Mean(std::move(name)), threshold_(threshold) {
  MDTRAIN_CHECK(threshold > 0.0 && threshold < 1.0, std::invalid_argument, prefix(),
                "threshold must be in (0, 1), got ", threshold);
}

void BinaryAccuracy::update(const Tensor& y_true, const Tensor& y_pred) {
  auto [rows, cols] = dense_layout([this] { return prefix(); }, y_true, y_pred);
  if (rows == 0) return;
  Tensor tv, pv;
  const double matches =
      ops::binary_matches(as_matrix(y_true, rows, cols, tv), as_matrix(y_pred, rows, cols, pv), threshold_);
  // Per sample, the mean over all its positions: rows * cols positions across the batch.
  accumulate_samples(matches, rows * cols, y_pred.dim(0));
}

Json BinaryAccuracy::config() const {
  Json j = Metric::config();
  j.set("threshold", threshold_);
  return j;
}

SparseTopKCategoricalAccuracy::SparseTopKCategoricalAccuracy(std::string name, std::int64_t k)
    : Mean(std::move(name)), k_(k) {
  MDTRAIN_CHECK(k >= 1, std::invalid_argument, prefix(), "k must be >= 1, got ", k);
}

void SparseTopKCategoricalAccuracy::update(const Tensor& y_true, const Tensor& y_pred) {
  auto [rows, classes] = sparse_layout([this] { return prefix(); }, y_true, y_pred);
  if (rows == 0) return;
  Tensor view;
  const double matches = ops::sparse_top_k_matches(y_true, as_matrix(y_pred, rows, classes, view), k_);
  accumulate_samples(matches, rows, y_pred.dim(0));
}

Json SparseTopKCategoricalAccuracy::config() const {
  Json j = Metric::config();
  j.set("k", k_);
  return j;
}

void MeanSquaredError::update(const Tensor& y_true, const Tensor& y_pred) {
  auto [rows, cols] = dense_layout([this] { return prefix(); }, y_true, y_pred);
  if (rows == 0) return;
  Tensor tv, pv;
  const double sum =
      ops::mean_squared_error(as_matrix(y_true, rows, cols, tv), as_matrix(y_pred, rows, cols, pv), 0.0, nullptr);
  accumulate_samples(sum, rows, y_pred.dim(0));
}

void MeanAbsoluteError::update(const Tensor& y_true, const Tensor& y_pred) {
  auto [rows, cols] = dense_layout([this] { return prefix(); }, y_true, y_pred);
  if (rows == 0) return;
  Tensor tv, pv;
  const double sum =
      ops::mean_absolute_error(as_matrix(y_true, rows, cols, tv), as_matrix(y_pred, rows, cols, pv), 0.0, nullptr);
  accumulate_samples(sum, rows, y_pred.dim(0));
}

}  // namespace metrics
}  // namespace mdtrain
