#pragma once
// The optimizer base class: Keras 3's BaseOptimizer over a list of Parameters.
//
// One apply() = Keras's apply_gradients(): clip the gradients (clipnorm per variable,
// global_clipnorm over all of them, or clipvalue), decay the weights (weight_decay * lr, before
// the update, as Keras), run the subclass's update rule on every trainable parameter, then
// iterations += 1. The learning rate of a step is schedule(iterations) read before the increment.
//
// Slots (Adam's momentum/velocity, ...) are created at the first apply() (or build()) from the
// trainable parameters' shapes and dtypes and are keyed by position in that list, never by
// address, so the same optimizer state can be restored into another model built the same way.
// Each slot kind of all parameters of one (device, dtype) lives in one buffer, in parameter order,
// so a model whose values and gradients are packed too (LayerStack) is updated by one op call over
// one segment. The update is element-wise with fixed per-step scalars: the same inputs give
// bitwise the same result on every replica, every run and however the op splits its elements.
#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/core/parameter.h"
#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/update_segment.h"
#include "mdtrain/optim/learning_rate_schedule.h"

namespace mdtrain {

// Keras's base_optimizer keyword arguments. Unset means off (Keras's None). At most one of the
// three clipping arguments may be set (Keras 3 raises otherwise).
struct OptimizerOptions {
  std::optional<double> weight_decay;
  std::optional<double> clipnorm;         // per variable: g * clipnorm / max(||g||, clipnorm)
  std::optional<double> clipvalue;        // clamp to [-clipvalue, clipvalue]
  std::optional<double> global_clipnorm;  // all grads * clip * min(1/||G||, 1/clip)
  std::string name;                       // empty: the class's Keras default ("adam", "SGD", ...)
};

class Optimizer {
 public:
  using State = std::vector<std::pair<std::string, Tensor>>;

  virtual ~Optimizer();

  // One update of every trainable parameter in `params` from its .grad. Throws
  // std::invalid_argument("[optim] ...") when the trainable parameters differ in count, shape or
  // dtype from those the optimizer was built with, or a gradient does not match its value.
  void apply(const ParameterList& params);
  // The same step restricted to elements [begin, end) of the trainable parameters laid end to end
  // (ZeRO-1: each replica updates its own shard). Clipping norms are still taken over the whole
  // gradients, and iterations still advances by one, so shards that together cover every element
  // give exactly the result of apply().
  void apply(const ParameterList& params, std::int64_t begin, std::int64_t end);
  // Creates the slots for these parameters (Keras's optimizer.build); apply() does it on first use.
  void build(const ParameterList& params);
  bool built() const { return built_; }
  // Number of trainable elements the optimizer was built for (the range apply()'s upper bound).
  std::int64_t total_size() const;
  // Bytes of slot memory this optimizer holds (0 until built): what a replica's device pays for
  // the optimizer state.
  std::int64_t state_bytes() const;

  // ZeRO-1's memory half: keep the slots of elements [begin, end) of the trainable parameters
  // laid end to end only (end may run past the last element). apply() must then stay inside that
  // range (std::logic_error otherwise). state() still returns whole tensors, zero outside the
  // range, so the states of optimizers holding ranges that cover everything stitch into the whole
  // state; set_state() takes the whole state and keeps the range. Built slots are re-cut, their
  // values kept (at the next apply).
  void hold_only(std::int64_t begin, std::int64_t end);

  std::int64_t iterations() const { return iterations_; }
  // The learning rate the next apply() will use: schedule(iterations) or the constant.
  double current_learning_rate() const { return learning_rate_.at(iterations_); }
  const LearningRate& learning_rate() const { return learning_rate_; }
  // Replaces the learning rate (or a schedule) by a constant; throws on a negative or NaN value.
  void set_learning_rate(double lr);
  void set_schedule(std::shared_ptr<const LearningRateSchedule> schedule);

  const std::string& name() const { return name_; }
  // Keras class name: "Adam", "SGD", "RMSprop", "Adagrad", "AdamW".
  virtual const char* class_name() const = 0;
  const OptimizerOptions& options() const { return options_; }

  // Parameters whose name contains any of these strings get no weight decay (Keras's
  // exclude_from_weight_decay(var_names=...), with substring matching instead of a regex).
  void exclude_from_weight_decay(std::vector<std::string> name_fragments);

  // Same hyperparameters, a deep copy of the state; the copy and the original are independent.
  virtual std::unique_ptr<Optimizer> clone() const = 0;

  // Checkpoint state: {"iterations", int64 scalar} then every slot, named
  // "<parameter name>/<slot name>" (slot names as Keras's: "momentum", "velocity", ...), grouped
  // by slot kind then parameter position, as Keras orders optimizer.variables. Deep copies.
  State state() const;
  // Restores state(). Names, order, shapes and dtypes are validated (std::invalid_argument naming
  // the first mismatch) before anything changes. Before build() the slots are kept and checked
  // against the parameters at the first apply().
  void set_state(const State& state);
  // The state for `params` carried over from `previous` (state() before the model changed shape:
  // Sequential.pop or add): iterations and the slots of the parameters still there (same name,
  // shape and dtype) are kept, new parameters' slots start at their initial values, as Keras
  // keeps its optimizer's variables per model variable. The result fits set_state() for params.
  State carried_state(const State& previous, const ParameterList& params) const;

  // Keras get_config(): {"name", "learning_rate" (number or schedule), "weight_decay",
  // "clipnorm", "global_clipnorm", "clipvalue", "use_ema", ...} plus the subclass's hyperparameters.
  virtual Json config() const;

 protected:
  Optimizer(LearningRate learning_rate, OptimizerOptions options, const char* default_name);
  // Deep-copies the slots (Tensor copies would share storage); used by subclasses' clone().
  Optimizer(const Optimizer& other);
  Optimizer& operator=(const Optimizer&) = delete;

  struct SlotSpec {
    const char* name;
    double initial_value;
  };
  // The slots each trainable parameter gets, in a fixed order.
  virtual std::vector<SlotSpec> slot_specs() const = 0;

  // One step's update of the trainable parameters of one (device, dtype): their element ranges
  // as segments of value, grad and slots (neighbours that continue each other already merged, so
  // a packed model is one segment), for one call of an op of ops/optimizer_ops.h.
  struct StepUpdate {
    Device device;
    DType dtype;
    std::vector<ops::UpdateSegment> segments;  // slots in slot_specs() order
    double learning_rate;
    std::int64_t iterations;  // before this step (Keras's local_step is iterations + 1)
    double clip_value;        // +inf when off
  };
  // Runs the subclass's op on the step's segments.
  virtual void update(const StepUpdate& step) = 0;

  static void check_range(double value, double lo, double hi, bool hi_inclusive, const char* what);

 private:
  void apply_range(const ParameterList& params, std::int64_t begin, std::int64_t end);
  // Re-lays slots_ out packed (see the class comment), copying their values.
  void pack_slots();
  std::vector<Parameter*> trainable(const ParameterList& params) const;
  void build_from(const std::vector<Parameter*>& params);
  void check_matches(const std::vector<Parameter*>& params) const;
  std::vector<std::string> state_names(const std::vector<std::string>& param_names) const;
  void validate_slots(const State& state, const std::vector<std::string>& expected_names,
                      const std::vector<Shape>& shapes, const std::vector<DType>& dtypes) const;
  bool uses_weight_decay(const std::string& param_name) const;
  // Whether parameter p's slots hold all of its elements.
  bool holds_whole(std::size_t p) const;
  // The slot's elements within its parameter, as a 1-D view of `whole` (the parameter's shape).
  Tensor held_part(const Tensor& whole, std::size_t p) const;

  LearningRate learning_rate_;
  OptimizerOptions options_;
  std::string name_;
  std::int64_t iterations_ = 0;
  std::vector<std::string> weight_decay_exclusions_;

  bool built_ = false;
  std::vector<std::string> param_names_;
  std::vector<Shape> shapes_;
  std::vector<DType> dtypes_;
  std::vector<std::vector<Tensor>> slots_;  // [parameter][slot]: whole, or 1-D over the held part
  State pending_;                           // set_state() before build(): checked at build
  bool has_pending_ = false;
  // Elements [held_begin_, held_end_) hold slots (hold_only); per parameter, where it starts in
  // the packed order and where its slots start (its first held element).
  std::int64_t held_begin_ = 0;
  std::int64_t held_end_ = INT64_MAX;
  std::vector<std::int64_t> param_offsets_;
  std::vector<std::int64_t> slot_origins_;
};

// Reads a Keras optimizer or schedule config, remembering which keys were used so finish() can
// reject unknown ones (Keras raises "Argument(s) not recognized").
class ConfigReader {
 public:
  ConfigReader(const Json& config, std::string what);
  double number(const std::string& key, double fallback);
  double required_number(const std::string& key);  // throws naming a missing key
  std::optional<double> optional_number(const std::string& key);
  bool boolean(const std::string& key, bool fallback);
  std::string string(const std::string& key, const std::string& fallback);
  const Json* raw(const std::string& key);  // nullptr when absent
  // Optimizer-level keys: name, learning_rate, weight_decay, clip*, and Keras's EMA /
  // loss-scale / accumulation keys, which are accepted only at their defaults.
  OptimizerOptions base_options();
  LearningRate learning_rate(double fallback);
  void finish() const;

 private:
  const Json& config_;
  std::string what_;
  std::vector<std::string> used_;
};

}  // namespace mdtrain
