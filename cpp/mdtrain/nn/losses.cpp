#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mdtrain/nn/target_checks.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/multi_output_loss.h"
#include "mdtrain/ops/loss_ops.h"

namespace mdtrain {

namespace {

constexpr const char* kReduction = "sum_over_batch_size";

using targets::check_common;
using targets::is_label_dtype;
using targets::shapes;

// Makes *dpred a y_pred-shaped buffer that does not share y_pred's storage.
template <class Prefix>
void prepare_grad(const Prefix& prefix, Tensor& dpred, const Tensor& y_pred) {
  ensure_buffer(dpred, y_pred.shape(), y_pred.dtype(), y_pred.device());
  MDTRAIN_CHECK(y_pred.numel() == 0 || !dpred.same_storage(y_pred), std::invalid_argument, prefix(),
                "dpred must not share storage with y_pred");
}

void check_smoothing(const char* loss, double s) {
  MDTRAIN_CHECK(s >= 0.0 && s <= 1.0, std::invalid_argument, "[loss] ", loss,
                ": label_smoothing must be in [0, 1], got ", s);
}

enum class Kind { SparseCategorical, Categorical, Binary, MeanSquared, MeanAbsolute };

struct Alias {
  const char* key;
  Kind kind;
};

// Keras's identifiers (keras.losses.get): function names, class names and the legacy aliases.
constexpr Alias kAliases[] = {
    {"sparse_categorical_crossentropy", Kind::SparseCategorical},
    {"SparseCategoricalCrossentropy", Kind::SparseCategorical},
    {"categorical_crossentropy", Kind::Categorical},
    {"CategoricalCrossentropy", Kind::Categorical},
    {"binary_crossentropy", Kind::Binary},
    {"BinaryCrossentropy", Kind::Binary},
    {"bce", Kind::Binary},
    {"BCE", Kind::Binary},
    {"mean_squared_error", Kind::MeanSquared},
    {"MeanSquaredError", Kind::MeanSquared},
    {"mse", Kind::MeanSquared},
    {"MSE", Kind::MeanSquared},
    {"mean_absolute_error", Kind::MeanAbsolute},
    {"MeanAbsoluteError", Kind::MeanAbsolute},
    {"mae", Kind::MeanAbsolute},
    {"MAE", Kind::MeanAbsolute},
};

Kind resolve(const std::string& name) {
  for (const auto& a : kAliases)
    if (name == a.key) return a.kind;
  std::string known;
  for (const auto& a : kAliases) known += cat(known.empty() ? "" : ", ", "'", a.key, "'");
  fail<std::invalid_argument>("[loss] unknown loss '", name, "'; known losses: ", known);
}

std::unique_ptr<Loss> build(Kind kind, bool from_logits, double label_smoothing,
                            std::optional<std::int64_t> ignore_class) {
  switch (kind) {
    case Kind::SparseCategorical:
      return std::make_unique<losses::SparseCategoricalCrossentropy>(from_logits, ignore_class);
    case Kind::Categorical: return std::make_unique<losses::CategoricalCrossentropy>(from_logits, label_smoothing);
    case Kind::Binary: return std::make_unique<losses::BinaryCrossentropy>(from_logits, label_smoothing);
    case Kind::MeanSquared: return std::make_unique<losses::MeanSquaredError>();
    case Kind::MeanAbsolute: return std::make_unique<losses::MeanAbsoluteError>();
  }
  fail<std::logic_error>("[loss] unhandled loss kind");
}

}  // namespace

// ---- Loss ---------------------------------------------------------------------------------------

Loss::~Loss() = default;

std::string Loss::prefix() const { return cat("[loss] ", name(), ": "); }

void Loss::validate(const Tensor& y_true, const Tensor& y_pred) const {
  check_common([this] { return prefix(); }, y_true, y_pred);
}

std::int64_t Loss::sample_count(const Tensor& y_true, const Tensor& y_pred) const {
  validate(y_true, y_pred);
  if (y_pred.ndim() == 1) return y_pred.dim(0);
  const std::int64_t last = y_pred.shape().back();
  return last == 0 ? 0 : y_pred.numel() / last;
}

double Loss::forward_backward(const Tensor& y_true, const Tensor& y_pred, double grad_scale, Tensor* dpred,
                              const Tensor* sample_weight) const {
  if (sample_weight != nullptr) {
    const std::int64_t batch = y_pred.ndim() >= 1 ? y_pred.dim(0) : 0;
    MDTRAIN_CHECK(sample_weight->defined() && sample_weight->dtype() == DType::Float32 &&
                      sample_weight->numel() == batch,
                  std::invalid_argument, prefix(), "sample_weight must be float32 with one value per sample (", batch,
                  " for y_pred of shape ", to_string(y_pred.shape()), "), got ",
                  sample_weight->defined()
                      ? cat(name_of(sample_weight->dtype()), " of shape ", to_string(sample_weight->shape()))
                      : std::string("an undefined tensor"));
  }
  return sum_and_gradient(y_true, y_pred, grad_scale, dpred, sample_weight);
}

double Loss::mean(const Tensor& y_true, const Tensor& y_pred, Tensor* dpred) const {
  const std::int64_t count = sample_count(y_true, y_pred);
  // Keras's divide_no_nan: an empty batch (or one whose labels are all ignored) has loss 0.
  const double scale = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
  const double sum = forward_backward(y_true, y_pred, scale, dpred);
  return count > 0 ? sum / static_cast<double>(count) : 0.0;
}

Json Loss::config() const {
  Json j = Json::object();
  j.set("name", name());
  j.set("reduction", kReduction);
  return j;
}

std::pair<Shape, Shape> squeeze_or_expand_to_same_rank(const Shape& y_true, const Shape& y_pred) {
  Shape t = y_true, p = y_pred;
  if (t.size() == p.size() + 1 && t.back() == 1) {
    if (p.size() == 1) p.push_back(1);
    else t.pop_back();
  } else if (p.size() == t.size() + 1 && p.back() == 1) {
    if (t.size() == 1) t.push_back(1);
    else p.pop_back();
  }
  return {t, p};
}

namespace {
bool equal_prefix(const Shape& a, const Shape& b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}
}  // namespace

bool same_shape_layout(const Shape& t, const Shape& p, std::int64_t* rows, std::int64_t* cols, int* rank) {
  const std::size_t rt = t.size(), rp = p.size();
  std::size_t n = 0;  // the common shape is p[0, n), unless a rank-1 side is expanded to (batch, 1)
  if (rt == rp) {
    if (t != p) return false;
    n = rp;
  } else if ((rt == rp + 1 && t.back() == 1) || (rp == rt + 1 && p.back() == 1)) {
    const std::size_t shorter = std::min(rt, rp);
    if (!equal_prefix(t, p, shorter)) return false;
    if (shorter == 1) {  // the rank-1 side is expanded: (batch, 1)
      *rows = p[0];
      *cols = 1;
      if (rank) *rank = 2;
      return true;
    }
    n = shorter;  // the longer side's trailing 1 is squeezed
  } else {
    return false;
  }
  if (n == 0) return false;
  if (rank) *rank = static_cast<int>(n);
  if (n == 1) {  // Keras averages over the batch axis itself: the same mean as (batch, 1)
    *rows = p[0];
    *cols = 1;
    return true;
  }
  *cols = p[n - 1];
  *rows = 1;
  for (std::size_t i = 0; i + 1 < n; ++i) *rows *= p[i];
  return true;
}

bool is_sparse_label_shape(const Shape& t, const Shape& p) {
  if (p.empty()) return false;
  if (t.size() + 1 == p.size()) return equal_prefix(t, p, t.size());
  return t.size() == p.size() && t.back() == 1 && equal_prefix(t, p, p.size() - 1);
}

std::unique_ptr<Loss> make_loss(const std::string& name_or_alias) {
  return build(resolve(name_or_alias), false, 0.0, std::nullopt);
}

std::unique_ptr<Loss> loss_from_config(const Json& config) {
  MDTRAIN_CHECK(config.is_object(), std::invalid_argument, "[loss] loss_from_config expects a JSON object, got ",
                config.dump());
  const Json* cfg = &config;
  std::string id;
  if (config.contains("class_name")) {
    id = config.at("class_name").as_string();
    if (id == "MultiOutputLoss") return multi_output_loss_from_config(config);
    if (config.contains("config")) cfg = &config.at("config");
  } else {
    id = config.at("name").as_string();
    if (id == "multi_output_loss") return multi_output_loss_from_config(config);
  }
  const Kind kind = resolve(id);
  // Copies: get() returns the fallback itself when the key is absent, a temporary here.
  const Json reduction = cfg->get("reduction", Json(kReduction));
  MDTRAIN_CHECK(reduction.is_string() && reduction.as_string() == kReduction, std::invalid_argument, "[loss] ", id,
                ": only reduction \"", kReduction, "\" is supported, got ", reduction.dump());
  const Json axis = cfg->get("axis", Json(-1));
  MDTRAIN_CHECK(axis.is_number() && axis.as_int() == -1, std::invalid_argument, "[loss] ", id,
                ": only axis -1 is supported, got ", axis.dump());
  const bool from_logits = cfg->get("from_logits", Json(false)).as_bool();
  const double smoothing = cfg->get("label_smoothing", Json(0.0)).as_number();
  const Json ignore = cfg->get("ignore_class", Json());
  std::optional<std::int64_t> ignore_class;
  if (!ignore.is_null()) ignore_class = ignore.as_int();
  return build(kind, from_logits, smoothing, ignore_class);
}

namespace losses {

// ---- SparseCategoricalCrossentropy --------------------------------------------------------------

SparseCategoricalCrossentropy::SparseCategoricalCrossentropy(bool from_logits, std::optional<std::int64_t> ignore_class)
    : from_logits_(from_logits), ignore_class_(ignore_class) {}

void SparseCategoricalCrossentropy::validate_shapes(const Tensor& y_true, const Tensor& y_pred) const {
  check_common([this] { return prefix(); }, y_true, y_pred);
  MDTRAIN_CHECK(y_pred.ndim() >= 2, std::invalid_argument, prefix(), "y_pred must be shaped (batch, ..., classes) (",
                shapes(y_true, y_pred), ")");
  if (!is_sparse_label_shape(y_true.shape(), y_pred.shape())) {
    Shape lead(y_pred.shape().begin(), y_pred.shape().end() - 1), lead1 = lead;
    lead1.push_back(1);
    fail<std::invalid_argument>(prefix(), "y_true must hold one class id per sample, shaped ", to_string(lead), " or ",
                                to_string(lead1), " (", shapes(y_true, y_pred), ")",
                                y_true.shape() == y_pred.shape() ? "; for one-hot targets use categorical_crossentropy"
                                                                 : "");
  }
  MDTRAIN_CHECK(y_pred.shape().back() > 0, std::invalid_argument, prefix(), "y_pred has no classes (",
                shapes(y_true, y_pred), ")");
}

void SparseCategoricalCrossentropy::validate(const Tensor& y_true, const Tensor& y_pred) const {
  validate_shapes(y_true, y_pred);
  const std::int64_t classes = y_pred.shape().back();
  const std::int64_t bad = ops::first_invalid_label(y_true, classes, ignore_class_);
  if (bad < 0) return;
  const double v = ops::element_as_double(y_true, bad);
  if (!std::isfinite(v) || v != std::floor(v))
    fail<std::invalid_argument>(prefix(), "label ", v, " at index ", bad, " is not an integer class id (",
                                shapes(y_true, y_pred), ")");
  fail<std::invalid_argument>(prefix(), "label ", v, " at index ", bad, " is out of range for ", classes, " classes (",
                              shapes(y_true, y_pred), ")");
}

std::int64_t SparseCategoricalCrossentropy::sample_count(const Tensor& y_true, const Tensor& y_pred) const {
  validate_shapes(y_true, y_pred);
  return counted_labels(y_true);
}

std::int64_t SparseCategoricalCrossentropy::counted_labels(const Tensor& y_true) const {
  const std::int64_t rows = y_true.numel();
  return ignore_class_ ? rows - ops::count_equal(y_true, static_cast<double>(*ignore_class_)) : rows;
}

double SparseCategoricalCrossentropy::sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale,
                                                       Tensor* dpred, const Tensor* sample_weight) const {
  validate(y_true, y_pred);
  const std::int64_t classes = y_pred.shape().back(), rows = y_true.numel();
  if (dpred) prepare_grad([this] { return prefix(); }, *dpred, y_pred);
  // The op takes labels of any shape with one id per row; (rows, classes) predictions go as they are.
  if (y_pred.ndim() == 2)
    return ops::sparse_categorical_crossentropy(y_true, y_pred, from_logits_, ignore_class_, grad_scale, dpred,
                                                sample_weight);
  Tensor g = dpred ? dpred->reshape({rows, classes}) : Tensor();
  return ops::sparse_categorical_crossentropy(y_true, y_pred.reshape({rows, classes}), from_logits_, ignore_class_,
                                              grad_scale, dpred ? &g : nullptr, sample_weight);
}

Json SparseCategoricalCrossentropy::config() const {
  Json j = Loss::config();
  j.set("from_logits", from_logits_);
  j.set("ignore_class", ignore_class_ ? Json(*ignore_class_) : Json());
  return j;
}

std::unique_ptr<Loss> SparseCategoricalCrossentropy::clone() const {
  return std::make_unique<SparseCategoricalCrossentropy>(*this);
}

// ---- DenseTargetLoss ----------------------------------------------------------------------------

std::pair<std::int64_t, std::int64_t> DenseTargetLoss::layout(const Tensor& y_true, const Tensor& y_pred) const {
  check_common([this] { return prefix(); }, y_true, y_pred);
  std::int64_t rows = 0, cols = 0;
  int rank = 0;
  if (!same_shape_layout(y_true.shape(), y_pred.shape(), &rows, &cols, &rank)) {
    const bool sparse_like = is_sparse_label_shape(y_true.shape(), y_pred.shape());
    fail<std::invalid_argument>(prefix(), "y_true shape ", to_string(y_true.shape()),
                                " is not compatible with y_pred shape ", to_string(y_pred.shape()),
                                ": expected equal shapes",
                                sparse_like && min_pred_rank() >= 2
                                    ? "; for integer class ids use sparse_categorical_crossentropy"
                                    : "");
  }
  MDTRAIN_CHECK(rank >= min_pred_rank(), std::invalid_argument, prefix(),
                "y_pred must be shaped (batch, ..., classes) (", shapes(y_true, y_pred), ")");
  MDTRAIN_CHECK(cols > 0, std::invalid_argument, prefix(), "the last axis of y_pred is empty (", shapes(y_true, y_pred),
                ")");
  return {rows, cols};
}

void DenseTargetLoss::validate(const Tensor& y_true, const Tensor& y_pred) const { layout(y_true, y_pred); }

std::int64_t DenseTargetLoss::sample_count(const Tensor& y_true, const Tensor& y_pred) const {
  return layout(y_true, y_pred).first;
}

namespace {
bool is_matrix(const Tensor& t, std::int64_t rows, std::int64_t cols) {
  return t.ndim() == 2 && t.dim(0) == rows && t.dim(1) == cols;
}
}  // namespace

template <class Op>
double DenseTargetLoss::run(const Tensor& y_true, const Tensor& y_pred, Tensor* dpred, const Tensor* sample_weight,
                            Op&& op) const {
  const auto [rows, cols] = layout(y_true, y_pred);
  if (dpred) prepare_grad([this] { return prefix(); }, *dpred, y_pred);
  Tensor t_view, p_view, g_view;
  const Tensor& t = is_matrix(y_true, rows, cols) ? y_true : (t_view = y_true.reshape({rows, cols}));
  const Tensor& p = is_matrix(y_pred, rows, cols) ? y_pred : (p_view = y_pred.reshape({rows, cols}));
  Tensor* g = dpred;
  if (dpred && !is_matrix(*dpred, rows, cols)) g = &(g_view = dpred->reshape({rows, cols}));
  return op(t, p, g, sample_weight);
}

// ---- CategoricalCrossentropy --------------------------------------------------------------------

CategoricalCrossentropy::CategoricalCrossentropy(bool from_logits, double label_smoothing)
    : from_logits_(from_logits), label_smoothing_(label_smoothing) {
  check_smoothing("categorical_crossentropy", label_smoothing);
}

double CategoricalCrossentropy::sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale,
                                                 Tensor* dpred, const Tensor* sample_weight) const {
  return run(y_true, y_pred, dpred, sample_weight, [&](const Tensor& t, const Tensor& p, Tensor* g, const Tensor* w) {
    return ops::categorical_crossentropy(t, p, from_logits_, label_smoothing_, grad_scale, g, w);
  });
}

Json CategoricalCrossentropy::config() const {
  Json j = Loss::config();
  j.set("from_logits", from_logits_);
  j.set("label_smoothing", label_smoothing_);
  j.set("axis", -1);
  return j;
}

std::unique_ptr<Loss> CategoricalCrossentropy::clone() const {
  return std::make_unique<CategoricalCrossentropy>(*this);
}

// ---- BinaryCrossentropy -------------------------------------------------------------------------

BinaryCrossentropy::BinaryCrossentropy(bool from_logits, double label_smoothing)
    : from_logits_(from_logits), label_smoothing_(label_smoothing) {
  check_smoothing("binary_crossentropy", label_smoothing);
}

double BinaryCrossentropy::sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale,
                                            Tensor* dpred, const Tensor* sample_weight) const {
  return run(y_true, y_pred, dpred, sample_weight, [&](const Tensor& t, const Tensor& p, Tensor* g, const Tensor* w) {
    return ops::binary_crossentropy(t, p, from_logits_, label_smoothing_, grad_scale, g, w);
  });
}

Json BinaryCrossentropy::config() const {
  Json j = Loss::config();
  j.set("from_logits", from_logits_);
  j.set("label_smoothing", label_smoothing_);
  j.set("axis", -1);
  return j;
}

std::unique_ptr<Loss> BinaryCrossentropy::clone() const { return std::make_unique<BinaryCrossentropy>(*this); }

// ---- MeanSquaredError / MeanAbsoluteError -------------------------------------------------------

double MeanSquaredError::sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale, Tensor* dpred,
                                          const Tensor* sample_weight) const {
  return run(y_true, y_pred, dpred, sample_weight, [&](const Tensor& t, const Tensor& p, Tensor* g, const Tensor* w) {
    return ops::mean_squared_error(t, p, grad_scale, g, w);
  });
}

std::unique_ptr<Loss> MeanSquaredError::clone() const { return std::make_unique<MeanSquaredError>(*this); }

double MeanAbsoluteError::sum_and_gradient(const Tensor& y_true, const Tensor& y_pred, double grad_scale, Tensor* dpred,
                                           const Tensor* sample_weight) const {
  return run(y_true, y_pred, dpred, sample_weight, [&](const Tensor& t, const Tensor& p, Tensor* g, const Tensor* w) {
    return ops::mean_absolute_error(t, p, grad_scale, g, w);
  });
}

std::unique_ptr<Loss> MeanAbsoluteError::clone() const { return std::make_unique<MeanAbsoluteError>(*this); }

}  // namespace losses
}  // namespace mdtrain
