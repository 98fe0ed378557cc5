#include "mdtrain/nn/batch_normalization.h"

#include <algorithm>
#include <cmath>

#include "mdtrain/nn/initializer.h"
#include "mdtrain/ops/normalization.h"
#include "mdtrain/ops/normalization_math.h"

namespace mdtrain {

BatchNormalization::BatchNormalization(std::string name, Options options)
    : Layer(std::move(name)), options_(std::move(options)) {
  MDTRAIN_CHECK(options_.axis == -1 || options_.axis >= 1, std::invalid_argument, "[batch_normalization] layer \"",
                name_,
                "\": only axis=-1 (the last, channels axis, or its index) is supported, got axis=", options_.axis);
  MDTRAIN_CHECK(options_.momentum >= 0.0 && options_.momentum <= 1.0, std::invalid_argument,
                "[batch_normalization] layer \"", name_, "\": momentum must be in [0, 1], got ", options_.momentum);
  MDTRAIN_CHECK(options_.epsilon >= 0.0 && std::isfinite(options_.epsilon), std::invalid_argument,
                "[batch_normalization] layer \"", name_, "\": epsilon must be a finite number >= 0, got ",
                options_.epsilon);
  // Validate names now, not at build time.
  make_initializer(options_.beta_initializer);
  make_initializer(options_.gamma_initializer);
  make_initializer(options_.moving_mean_initializer);
  make_initializer(options_.moving_variance_initializer);
  gamma_beta_.beta_regularizer = make_regularizer(options_.beta_regularizer);
  gamma_beta_.gamma_regularizer = make_regularizer(options_.gamma_regularizer);
}

Shape BatchNormalization::compute_output_shape(const Shape& input_shape) const {
  check_last_axis_input("batch_normalization", name_, options_.axis, input_shape, "channels",
                        "the last, channels axis");
  require_known_dim(input_shape, -1, "its statistics");
  return input_shape;
}

void BatchNormalization::build_weights(const Shape& input_shape, std::uint64_t seed) {
  channels_ = input_shape.back();
  const std::int64_t c = channels_;
  gamma_beta_.build(name_, c, dtype_, seed, options_.scale, options_.center, options_.gamma_initializer,
                    options_.beta_initializer);
  auto make = [&](const char* suffix, const Json& init, std::uint64_t stream) {
    Parameter p(name_ + "/" + suffix, Tensor({c}, dtype_));
    Rng rng(seed, stream);
    make_initializer(init)->fill(p.value, c, c, rng);  // Keras's fans of a 1-D shape: (c, c)
    p.trainable = false;
    return p;
  };
  moving_mean_ = make("moving_mean", options_.moving_mean_initializer, 2);
  moving_variance_ = make("moving_variance", options_.moving_variance_initializer, 3);
  allocate_statistics();
}

void BatchNormalization::allocate_statistics() {
  host_stats_ = Tensor::zeros({kStatRows, channels_}, DType::Float64);
  stats_ = host_stats_;
  var_.assign(static_cast<std::size_t>(channels_), 0.0);
}

void BatchNormalization::place_statistics(const Device& device) {
  if (device.is_cpu()) stats_ = host_stats_;
  else if (stats_.device() != device) stats_ = Tensor({kStatRows, channels_}, DType::Float64, device);
}

Tensor BatchNormalization::stat(StatRow row) const { return stats_.rows(row, row + 1).reshape({channels_}); }

double* BatchNormalization::host_stat(StatRow row) { return host_stats_.data<double>() + row * channels_; }

void BatchNormalization::upload(StatRow first, StatRow last) {
  if (stats_.device().is_cpu()) return;  // stats_ is host_stats_
  Tensor dst = stats_.rows(first, last + 1);
  dst.copy_from(host_stats_.rows(first, last + 1));
}

void BatchNormalization::download(StatRow first, StatRow last) {
  if (stats_.device().is_cpu()) return;
  Tensor dst = host_stats_.rows(first, last + 1);
  dst.copy_from(stats_.rows(first, last + 1));  // returns once the values are on the host
}

Tensor BatchNormalization::forward(const Tensor& x, const ForwardContext& ctx) {
  check_input(x);
  last_input_shape_ = x.shape();
  const Tensor x2d = x.reshape({-1, channels_});
  const std::int64_t rows = x2d.dim(0);
  place_statistics(x.device());
  // A frozen BatchNormalization runs in inference mode, in training too (Keras 3's rule).
  last_training_ = ctx.training && trainable_;
  double* mean = host_stat(kMean);
  if (last_training_) {
    replicas_ = ctx.replicas;
    defer_ = ctx.defer_statistics;
    recompute_ = ctx.recompute;
    MDTRAIN_CHECK(!defer_ || !options_.synchronized, std::invalid_argument, "[batch_normalization] layer \"", name_,
                  "\": synchronized=True is not supported under pipeline parallelism (a micro-batch cannot wait for "
                  "the statistics of the others)");
    training_statistics(x2d, rows);
  } else {
    replicas_ = nullptr;  // inference never runs a collective
    const std::vector<double> m = load_float64(moving_mean_.value);
    std::copy(m.begin(), m.end(), mean);
    var_ = load_float64(moving_variance_.value);
  }
  double* inv_std = host_stat(kInvStd);
  for (std::int64_t c = 0; c < channels_; ++c)
    inv_std[c] = math::inverse_std(var_[static_cast<std::size_t>(c)], options_.epsilon);
  upload(kMean, kInvStd);
  ensure_buffer(xhat_, x2d.shape(), dtype_, x.device());
  ensure_buffer(y_, x2d.shape(), dtype_, x.device());
  ops::channel_normalize(x2d, stat(kMean), stat(kInvStd), gamma_beta_.gamma_or_none(options_.scale),
                         gamma_beta_.beta_or_none(options_.center), &xhat_, y_);
  return y_.reshape(last_input_shape_);
}

void BatchNormalization::forward_without_rows(const ForwardContext& ctx) {
  last_training_ = ctx.training && trainable_;
  if (!last_training_) return;
  replicas_ = ctx.replicas;
  defer_ = ctx.defer_statistics;
  recompute_ = ctx.recompute;
  training_statistics(Tensor(), 0);
}

// The cross-replica sums take host memory although the NCCL communicator would take device
// memory in place: CrossReplicaContext promises host memory to every backend (threads, MPI and
// hierarchical communicators reach no GPU memory), the per-channel arithmetic around the sums
// (counts, variance_from_sums, the moving averages) runs on the host anyway, and the values are a
// few KB per layer, so the copies cost little next to the all-reduce's own latency.
void BatchNormalization::training_statistics(const Tensor& x2d, std::int64_t rows) {
  const std::int64_t c = channels_;
  const auto cs = static_cast<std::size_t>(c);
  const bool several = replica_count(replicas_) > 1;
  double* mean = host_stat(kMean);
  double* var = var_.data();
  const double* a = host_stat(kSumA);
  const double* b = host_stat(kSumB);
  // exchange_ = [count, per-channel a (c values), per-channel b (c values)], summed over replicas.
  exchange_.assign(1 + 2 * cs, 0.0);
  exchange_[0] = static_cast<double>(rows);
  if (options_.synchronized) {
    // Sums of x - moving_mean: the shift is the same on every replica (the moving statistics are
    // identical) and, once they have warmed up, close to the mean, so E[d^2] - E[d]^2 cancels
    // little even in float64.
    const std::vector<double> shift = load_float64(moving_mean_.value);
    std::copy(shift.begin(), shift.end(), host_stat(kShift));
    if (rows > 0) {
      upload(kShift, kShift);
      Tensor sum = stat(kSumA), sum_squares = stat(kSumB);
      ops::channel_sums(x2d, stat(kShift), sum, sum_squares);
      download(kSumA, kSumB);
      for (std::size_t i = 0; i < cs; ++i) {
        exchange_[1 + i] = a[i];
        exchange_[1 + cs + i] = b[i];
      }
    }
    if (several) replicas_->sum(exchange_.data(), exchange_.size());
    count_ = exchange_[0];
    if (count_ == 0) return;  // no rows anywhere: nothing to normalize or to learn from
    for (std::size_t i = 0; i < cs; ++i) {
      mean[i] = shift[i] + exchange_[1 + i] / count_;
      var[i] = math::variance_from_sums(count_, exchange_[1 + i], exchange_[1 + cs + i]);
    }
    update_moving_statistics(mean, var);
    return;
  }
  // Per replica: normalize with this slice's statistics. The moving statistics take the replicas'
  // statistics averaged with weights = their row counts, so that an uneven last batch counts each
  // row once, a replica with no rows counts for nothing, and every replica computes the same
  // average from the same sums: the moving statistics stay bitwise identical. (TF's moving
  // variables aggregate with MEAN across replicas for the same reason.)
  count_ = static_cast<double>(rows);
  if (rows > 0) {
    Tensor moment_mean = stat(kSumA), moment_var = stat(kSumB);
    ops::channel_moments(x2d, moment_mean, moment_var);
    download(kSumA, kSumB);
    std::copy(a, a + c, mean);
    std::copy(b, b + c, var);
    for (std::size_t i = 0; i < cs; ++i) {
      exchange_[1 + i] = count_ * mean[i];
      exchange_[1 + cs + i] = count_ * var[i];
    }
  }
  if (defer_) {
    // Recorded, not applied: apply_deferred_statistics moves the moving statistics once per
    // global batch. A recomputed forward was recorded the first time.
    if (rows > 0 && !recompute_) {
      deferred_counts_.push_back(count_);
      deferred_means_.insert(deferred_means_.end(), mean, mean + c);
      deferred_vars_.insert(deferred_vars_.end(), var, var + c);
    }
    return;
  }
  if (!several) {
    if (rows > 0) update_moving_statistics(mean, var);
    return;
  }
  replicas_->sum(exchange_.data(), exchange_.size());
  const double total = exchange_[0];
  if (total == 0) return;
  std::vector<double> avg_mean(cs), avg_var(cs);
  for (std::size_t i = 0; i < cs; ++i) {
    avg_mean[i] = exchange_[1 + i] / total;
    avg_var[i] = exchange_[1 + cs + i] / total;
  }
  update_moving_statistics(avg_mean.data(), avg_var.data());
}

void BatchNormalization::apply_deferred_statistics(CrossReplicaContext* replicas) {
  const auto cs = static_cast<std::size_t>(channels_);
  const std::size_t parts = deferred_counts_.size();
  const bool several = replica_count(replicas) > 1;
  // First the global count and mean, then the spread: the parts' variances plus their means'
  // spread around the global mean (Chan et al.), each summed over the replicas when there are
  // several (every replica makes both calls, with or without recorded parts).
  std::vector<double> sums(1 + cs, 0.0);
  for (std::size_t p = 0; p < parts; ++p) {
    const double n = deferred_counts_[p];
    sums[0] += n;
    for (std::size_t k = 0; k < cs; ++k) sums[1 + k] += n * deferred_means_[p * cs + k];
  }
  if (several) replicas->sum(sums.data(), sums.size());
  const double total = sums[0];
  std::vector<double> mean(cs), spread(cs, 0.0);
  for (std::size_t k = 0; k < cs; ++k) mean[k] = total > 0 ? sums[1 + k] / total : 0.0;
  for (std::size_t p = 0; p < parts; ++p) {
    const double n = deferred_counts_[p];
    for (std::size_t k = 0; k < cs; ++k) {
      const double d = deferred_means_[p * cs + k] - mean[k];
      spread[k] += n * deferred_vars_[p * cs + k] + n * d * d;
    }
  }
  if (several) replicas->sum(spread.data(), spread.size());
  deferred_counts_.clear();
  deferred_means_.clear();
  deferred_vars_.clear();
  if (total == 0) return;
  for (std::size_t k = 0; k < cs; ++k) spread[k] /= total;
  update_moving_statistics(mean.data(), spread.data());
}

void BatchNormalization::move_deferred_statistics_to(Layer& to) {
  auto* other = dynamic_cast<BatchNormalization*>(&to);
  MDTRAIN_CHECK(other != nullptr && other->channels_ == channels_, std::invalid_argument,
                "[batch_normalization] layer \"", name_,
                "\" can move its deferred statistics only to a clone of itself");
  if (other == this) return;
  other->deferred_counts_.insert(other->deferred_counts_.end(), deferred_counts_.begin(), deferred_counts_.end());
  other->deferred_means_.insert(other->deferred_means_.end(), deferred_means_.begin(), deferred_means_.end());
  other->deferred_vars_.insert(other->deferred_vars_.end(), deferred_vars_.begin(), deferred_vars_.end());
  deferred_counts_.clear();
  deferred_means_.clear();
  deferred_vars_.clear();
}

void BatchNormalization::update_moving_statistics(const double* mean, const double* var) {
  std::vector<double> m = load_float64(moving_mean_.value), v = load_float64(moving_variance_.value);
  for (std::size_t k = 0; k < m.size(); ++k) {
    m[k] = math::moving_average(m[k], mean[k], options_.momentum);
    v[k] = math::moving_average(v[k], var[k], options_.momentum);
  }
  store_float64(m.data(), moving_mean_.value);
  store_float64(v.data(), moving_variance_.value);
}

Tensor BatchNormalization::backward(const Tensor& dy, bool need_input_grad) {
  const Tensor dy2 = dy.reshape({-1, channels_});
  MDTRAIN_CHECK(dy2.shape() == xhat_.shape(), std::logic_error, "[batch_normalization] layer \"", name_,
                "\": backward got dy of shape ", to_string(dy.shape()), " for a forward on ",
                to_string(last_input_shape_));
  Tensor sums_dy = stat(kSumA), sums_dy_xhat = stat(kSumB);
  ops::channel_grad_sums(dy2, xhat_, sums_dy, sums_dy_xhat);
  download(kSumA, kSumB);
  const double* sum_dy = host_stat(kSumA);
  const double* sum_dy_xhat = host_stat(kSumB);
  // Parameter gradients are this replica's sums; the engine's gradient all-reduce adds them up.
  gamma_beta_.store_gradients(host_stats_.rows(kSumA, kSumA + 1), host_stats_.rows(kSumB, kSumB + 1), options_.scale,
                              options_.center);
  if (!need_input_grad) return Tensor();
  const std::int64_t c = channels_;
  double* mdy = host_stat(kMeanDy);
  double* mdyx = host_stat(kMeanDyXhat);
  if (last_training_) {
    // The statistics depend on every row they were taken over: dx needs the means of dy and
    // dy * xhat over those rows, the global batch's when synchronized.
    if (options_.synchronized && replica_count(replicas_) > 1) {
      exchange_.resize(2 * static_cast<std::size_t>(c));
      for (std::int64_t i = 0; i < c; ++i) {
        exchange_[static_cast<std::size_t>(i)] = sum_dy[i];
        exchange_[static_cast<std::size_t>(c + i)] = sum_dy_xhat[i];
      }
      replicas_->sum(exchange_.data(), exchange_.size());
      for (std::int64_t i = 0; i < c; ++i) {
        mdy[i] = exchange_[static_cast<std::size_t>(i)] / count_;
        mdyx[i] = exchange_[static_cast<std::size_t>(c + i)] / count_;
      }
    } else {
      for (std::int64_t i = 0; i < c; ++i) {
        mdy[i] = sum_dy[i] / count_;
        mdyx[i] = sum_dy_xhat[i] / count_;
      }
    }
  } else {
    // Fixed (moving) statistics: y is affine in x.
    for (std::int64_t i = 0; i < c; ++i) mdy[i] = mdyx[i] = 0.0;
  }
  const std::vector<double> gamma =
      options_.scale ? load_float64(gamma_beta_.gamma.value) : std::vector<double>(static_cast<std::size_t>(c), 1.0);
  double* scale = host_stat(kScale);
  const double* inv_std = host_stat(kInvStd);
  for (std::int64_t i = 0; i < c; ++i) scale[i] = gamma[static_cast<std::size_t>(i)] * inv_std[i];
  upload(kScale, kMeanDyXhat);
  ensure_buffer(dx_, dy2.shape(), dtype_, dy.device());
  ops::channel_normalize_backward(dy2, xhat_, stat(kScale), stat(kMeanDy), stat(kMeanDyXhat), dx_);
  return dx_.reshape(last_input_shape_);
}

void BatchNormalization::backward_without_rows(bool need_input_grad) {
  // Mirrors backward(): the one collective there is the synchronized dx means.
  if (!last_training_ || !need_input_grad || !options_.synchronized || replica_count(replicas_) <= 1) return;
  exchange_.assign(2 * static_cast<std::size_t>(channels_), 0.0);
  replicas_->sum(exchange_.data(), exchange_.size());
}

std::vector<Parameter*> BatchNormalization::parameters() {
  if (!built_) return {};
  std::vector<Parameter*> out = gamma_beta_.parameters(built_, options_.scale, options_.center);
  out.push_back(&moving_mean_);
  out.push_back(&moving_variance_);
  return out;
}

double BatchNormalization::regularization_loss() const {
  return gamma_beta_.regularization_loss(built_, options_.scale, options_.center);
}

void BatchNormalization::add_regularization_gradients() {
  gamma_beta_.add_regularization_gradients(options_.scale, options_.center);
}

std::unique_ptr<Layer> BatchNormalization::clone() const {
  auto copy = std::make_unique<BatchNormalization>(name_, options_);
  copy->copy_build_state(*this);
  copy->gamma_beta_.copy_values_from(gamma_beta_, built_, options_.scale, options_.center);
  if (built_) {
    copy->channels_ = channels_;
    auto dup = [](const Parameter& p) {
      Parameter q(p.name, p.value.clone());
      q.trainable = p.trainable;
      return q;
    };
    copy->moving_mean_ = dup(moving_mean_);
    copy->moving_variance_ = dup(moving_variance_);
    copy->allocate_statistics();
  }
  return copy;
}

Json BatchNormalization::config() const {
  Json c = Layer::config();
  c.set("axis", options_.axis);
  c.set("momentum", options_.momentum);
  c.set("epsilon", options_.epsilon);
  c.set("center", options_.center);
  c.set("scale", options_.scale);
  c.set("beta_initializer", make_initializer(options_.beta_initializer)->config());
  c.set("gamma_initializer", make_initializer(options_.gamma_initializer)->config());
  c.set("moving_mean_initializer", make_initializer(options_.moving_mean_initializer)->config());
  c.set("moving_variance_initializer", make_initializer(options_.moving_variance_initializer)->config());
  c.set("beta_regularizer", gamma_beta_.beta_regularizer ? gamma_beta_.beta_regularizer->config() : Json());
  c.set("gamma_regularizer", gamma_beta_.gamma_regularizer ? gamma_beta_.gamma_regularizer->config() : Json());
  c.set("beta_constraint", Json());
  c.set("gamma_constraint", Json());
  c.set("synchronized", options_.synchronized);
  return c;
}

std::int64_t normalization_axis_from_json(const std::string& layer, const Json& axis) {
  if (axis.is_array()) {
    MDTRAIN_CHECK(axis.as_array().size() == 1, std::invalid_argument, "[layers] layer \"", layer,
                  "\": only one normalization axis (the last, axis=-1) is supported, got axis=", axis.dump());
    return axis.as_array()[0].as_int();
  }
  return axis.as_int();
}

void check_last_axis_input(const char* area, const std::string& layer, std::int64_t axis, const Shape& input_shape,
                           const char* features, const char* last_axis) {
  MDTRAIN_CHECK(!input_shape.empty(), std::invalid_argument, "[", area, "] layer \"", layer,
                "\" needs inputs of rank >= 2 (batch, ..., ", features, "), got input shape (None,)");
  const auto last = static_cast<std::int64_t>(input_shape.size());  // index of the last axis with the batch
  if (axis != -1 && axis != last) {
    Shape full{-1};
    full.insert(full.end(), input_shape.begin(), input_shape.end());
    fail<std::invalid_argument>("[", area, "] layer \"", layer, "\": only axis=-1 (", last_axis, ": axis=", last,
                                " for inputs of shape ", to_string(full), ") is supported, got axis=", axis);
  }
}

std::unique_ptr<Layer> BatchNormalization::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  BatchNormalization::Options o;
  o.axis = normalization_axis_from_json(name, c.get("axis", Json(-1)));
  o.momentum = c.get("momentum", 0.99).as_number();
  o.epsilon = c.get("epsilon", 1e-3).as_number();
  read_gamma_beta_config(c, o);
  o.moving_mean_initializer = c.get("moving_mean_initializer", "zeros");
  o.moving_variance_initializer = c.get("moving_variance_initializer", "ones");
  o.synchronized = c.get("synchronized", false).as_bool();
  return std::make_unique<BatchNormalization>(name, o);
}

}  // namespace mdtrain
