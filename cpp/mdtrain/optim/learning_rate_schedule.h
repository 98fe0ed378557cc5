#pragma once
// Learning-rate schedules as keras.optimizers.schedules: a schedule maps the optimizer's
// iteration count (before the step is taken) to a learning rate. Schedules are immutable, so
// clones of an optimizer may share one. Values are computed in double.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mdtrain/core/json.h"

namespace mdtrain {

class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule();
  virtual double operator()(std::int64_t step) const = 0;
  // Keras class name ("ExponentialDecay"); the key used by schedule_from_config.
  virtual const char* class_name() const = 0;
  // The Keras get_config() dictionary.
  virtual Json config() const = 0;
};

// A fixed learning rate. Keras has no such class (a float is kept in a variable); here it lets an
// optimizer treat every learning rate the same way, and it serialises as the bare number.
class ConstantSchedule : public LearningRateSchedule {
 public:
  explicit ConstantSchedule(double value);
  double operator()(std::int64_t) const override { return value_; }
  const char* class_name() const override { return "Constant"; }
  Json config() const override;
  double value() const { return value_; }

 private:
  double value_;
};

// initial_learning_rate * decay_rate ^ (step / decay_steps); with staircase the exponent is
// floor(step / decay_steps).
class ExponentialDecay : public LearningRateSchedule {
 public:
  ExponentialDecay(double initial_learning_rate, double decay_steps, double decay_rate, bool staircase = false,
                   std::string name = "ExponentialDecay");
  double operator()(std::int64_t step) const override;
  const char* class_name() const override { return "ExponentialDecay"; }
  Json config() const override;

 private:
  double initial_learning_rate_, decay_steps_, decay_rate_;
  bool staircase_;
  std::string name_;
};

// values[0] while step <= boundaries[0], values[i] while boundaries[i-1] < step <= boundaries[i],
// values.back() after the last boundary. Boundaries must increase strictly (Keras does not check;
// unsorted boundaries there give sums of several values).
class PiecewiseConstantDecay : public LearningRateSchedule {
 public:
  PiecewiseConstantDecay(std::vector<double> boundaries, std::vector<double> values,
                         std::string name = "PiecewiseConstant");
  double operator()(std::int64_t step) const override;
  const char* class_name() const override { return "PiecewiseConstantDecay"; }
  Json config() const override;

 private:
  std::vector<double> boundaries_, values_;
  std::string name_;
};

// Cosine decay with optional linear warmup, as Keras:
//   without warmup_target: s = min(step, decay_steps);
//     lr = initial * ((1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps)) + alpha)
//   with warmup_target: s = min(step, decay_steps + warmup_steps); while s < warmup_steps
//     lr = (warmup_target - initial) * s / warmup_steps + initial, then the cosine from
//     warmup_target over (s - warmup_steps).
class CosineDecay : public LearningRateSchedule {
 public:
  CosineDecay(double initial_learning_rate, double decay_steps, double alpha = 0.0, std::string name = "CosineDecay",
              std::optional<double> warmup_target = std::nullopt, double warmup_steps = 0);
  double operator()(std::int64_t step) const override;
  const char* class_name() const override { return "CosineDecay"; }
  Json config() const override;

 private:
  double initial_learning_rate_, decay_steps_, alpha_;
  std::string name_;
  std::optional<double> warmup_target_;
  double warmup_steps_;
};

// {"module": "keras.optimizers.schedules", "class_name": ..., "config": ..., "registered_name": null}
Json serialize_schedule(const LearningRateSchedule& schedule);
// Reads serialize_schedule's form (only "class_name" and "config" are required). Unknown class
// names or config keys throw std::invalid_argument("[optim] ...").
std::shared_ptr<const LearningRateSchedule> schedule_from_config(const Json& config);

// An optimizer's learning rate: a constant or a schedule. Implicit from either, so option structs
// and constructors read like Keras: Adam(0.01) or Adam(std::make_shared<ExponentialDecay>(...)).
class LearningRate {
 public:
  LearningRate(double value);                                          // NOLINT(google-explicit-constructor)
  LearningRate(std::shared_ptr<const LearningRateSchedule> schedule);  // NOLINT
  // Any concrete schedule pointer (one conversion, so Adam(std::make_shared<CosineDecay>(...))).
  template <class S, class = std::enable_if_t<std::is_base_of_v<LearningRateSchedule, S>>>
  LearningRate(std::shared_ptr<S> schedule)  // NOLINT
      : LearningRate(std::shared_ptr<const LearningRateSchedule>(std::move(schedule))) {}
  double at(std::int64_t step) const { return (*schedule_)(step); }
  bool is_constant() const;
  const std::shared_ptr<const LearningRateSchedule>& schedule() const { return schedule_; }
  // A number for a constant, serialize_schedule(...) otherwise: what Keras puts under
  // "learning_rate" in an optimizer's config.
  Json config() const;
  static LearningRate from_config(const Json& value);

 private:
  std::shared_ptr<const LearningRateSchedule> schedule_;
};

}  // namespace mdtrain
