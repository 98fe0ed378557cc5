#include "mdtrain/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

namespace {

void check_clip_argument(const std::optional<double>& value, const char* what) {
  // Keras silently ignores a clip argument <= 0; a clear error is kinder.
  if (value) {
    MDTRAIN_CHECK(std::isfinite(*value) && *value > 0, std::invalid_argument, "[optim] ", what,
                  " must be a positive number or unset, got ", *value);
  }
}

// state() hands out host tensors whatever device the slots live on (checkpoints, get_weights).
Tensor host_copy(const Tensor& t) {
  if (t.device().is_cpu()) return t.clone();
  Tensor h(t.shape(), t.dtype());
  h.copy_from(t);
  return h;
}

Json optional_json(const std::optional<double>& v) { return v ? Json(*v) : Json(); }

}  // namespace

Optimizer::Optimizer(LearningRate learning_rate, OptimizerOptions options, const char* default_name)
    : learning_rate_(std::move(learning_rate)), options_(std::move(options)) {
  name_ = options_.name.empty() ? default_name : options_.name;
  int clip_args = (options_.clipnorm ? 1 : 0) + (options_.clipvalue ? 1 : 0) + (options_.global_clipnorm ? 1 : 0);
  MDTRAIN_CHECK(clip_args <= 1, std::invalid_argument,
                "[optim] only one of clipnorm, clipvalue and global_clipnorm can be set; got clipnorm=",
                options_.clipnorm ? cat(*options_.clipnorm) : "None",
                ", clipvalue=", options_.clipvalue ? cat(*options_.clipvalue) : "None",
                ", global_clipnorm=", options_.global_clipnorm ? cat(*options_.global_clipnorm) : "None");
  check_clip_argument(options_.clipnorm, "clipnorm");
  check_clip_argument(options_.clipvalue, "clipvalue");
  check_clip_argument(options_.global_clipnorm, "global_clipnorm");
  if (options_.weight_decay) {
    MDTRAIN_CHECK(std::isfinite(*options_.weight_decay) && *options_.weight_decay >= 0, std::invalid_argument,
                  "[optim] weight_decay must be >= 0, got ", *options_.weight_decay);
  }
}

Optimizer::Optimizer(const Optimizer& other)
    : learning_rate_(other.learning_rate_),
      options_(other.options_),
      name_(other.name_),
      iterations_(other.iterations_),
      weight_decay_exclusions_(other.weight_decay_exclusions_),
      built_(other.built_),
      param_names_(other.param_names_),
      shapes_(other.shapes_),
      dtypes_(other.dtypes_),
      slots_(other.slots_),
      has_pending_(other.has_pending_),
      held_begin_(other.held_begin_),
      held_end_(other.held_end_),
      param_offsets_(other.param_offsets_),
      slot_origins_(other.slot_origins_) {
  pack_slots();  // new buffers: the copy shares no slot storage with the original
  for (const auto& [n, t] : other.pending_) pending_.emplace_back(n, t.clone());
}

Optimizer::~Optimizer() = default;

void Optimizer::check_range(double value, double lo, double hi, bool hi_inclusive, const char* what) {
  bool ok = value >= lo && (hi_inclusive ? value <= hi : value < hi);
  MDTRAIN_CHECK(ok, std::invalid_argument, "[optim] ", what, " must be in [", lo, ", ", hi, hi_inclusive ? "]" : ")",
                ", got ", value);
}

void Optimizer::set_learning_rate(double lr) { learning_rate_ = LearningRate(lr); }

void Optimizer::set_schedule(std::shared_ptr<const LearningRateSchedule> schedule) {
  learning_rate_ = LearningRate(std::move(schedule));
}

void Optimizer::exclude_from_weight_decay(std::vector<std::string> name_fragments) {
  weight_decay_exclusions_ = std::move(name_fragments);
}

bool Optimizer::uses_weight_decay(const std::string& param_name) const {
  for (const auto& fragment : weight_decay_exclusions_)
    if (param_name.find(fragment) != std::string::npos) return false;
  return true;
}

std::vector<Parameter*> Optimizer::trainable(const ParameterList& params) const {
  std::vector<Parameter*> out;
  out.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    Parameter* p = params[i];
    MDTRAIN_CHECK(p != nullptr, std::invalid_argument, "[optim] parameter ", i, " is null");
    if (!p->trainable) continue;
    MDTRAIN_CHECK(p->value.defined() && is_floating(p->value.dtype()), std::invalid_argument, "[optim] parameter '",
                  p->name, "' must be a defined float32 or float64 tensor");
    MDTRAIN_CHECK(p->grad.defined() == false || p->grad.device() == p->value.device(), std::invalid_argument,
                  "[optim] parameter '", p->name, "' is on ", p->value.device().to_string(), " but its gradient is on ",
                  p->grad.device().to_string());
    out.push_back(p);
  }
  return out;
}

std::vector<std::string> Optimizer::state_names(const std::vector<std::string>& param_names) const {
  std::vector<std::string> names{"iterations"};
  for (const auto& spec : slot_specs())
    for (const auto& p : param_names) names.push_back(p + "/" + spec.name);
  return names;
}

void Optimizer::validate_slots(const State& state, const std::vector<std::string>& expected,
                               const std::vector<Shape>& shapes, const std::vector<DType>& dtypes) const {
  MDTRAIN_CHECK(state.size() == expected.size(), std::invalid_argument, "[optim] ", name_, ": state has ", state.size(),
                " entries but this optimizer over ", shapes.size(), " parameters has ", expected.size());
  std::size_t n_params = shapes.size();
  for (std::size_t i = 1; i < state.size(); ++i) {
    const auto& [name, t] = state[i];
    MDTRAIN_CHECK(name == expected[i], std::invalid_argument, "[optim] ", name_, ": state entry ", i, " is named '",
                  name, "' but expected '", expected[i], "'");
    std::size_t p = (i - 1) % n_params;
    MDTRAIN_CHECK(t.defined() && t.shape() == shapes[p] && t.dtype() == dtypes[p], std::invalid_argument, "[optim] ",
                  name_, ": state entry '", name, "' has shape ", t.defined() ? to_string(t.shape()) : "undefined", " ",
                  t.defined() ? name_of(t.dtype()) : "", " but the parameter has shape ", to_string(shapes[p]), " ",
                  name_of(dtypes[p]));
  }
}

void Optimizer::build(const ParameterList& params) { build_from(trainable(params)); }

void Optimizer::build_from(const std::vector<Parameter*>& params) {
  if (built_) {
    check_matches(params);
    // Slots live with their parameters: an optimizer built on the host and then given a GPU
    // replica's parameters (or the other way round) moves its slots once.
    bool moved_any = false;
    for (std::size_t p = 0; p < params.size(); ++p)
      for (auto& slot : slots_[p])
        if (slot.device() != params[p]->value.device() &&
            !(slot.device().is_cpu() && params[p]->value.device().is_cpu())) {
          Tensor moved(slot.shape(), slot.dtype(), params[p]->value.device());
          moved.copy_from(slot);
          slot = std::move(moved);
          moved_any = true;
        }
    if (moved_any) pack_slots();
    return;
  }
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (Parameter* p : params) {
    names.push_back(p->name);
    shapes.push_back(p->value.shape());
    dtypes.push_back(p->value.dtype());
  }
  auto specs = slot_specs();
  if (has_pending_) validate_slots(pending_, state_names(names), shapes, dtypes);

  // Where each parameter starts in the packed order, and the part of it whose slots are held.
  std::vector<std::int64_t> offsets, origins, lengths;
  std::int64_t total = 0;
  for (const Shape& shape : shapes) {
    offsets.push_back(total);
    const std::int64_t n = numel(shape);
    const std::int64_t lo = std::clamp(held_begin_, total, total + n);
    const std::int64_t hi = std::clamp(held_end_, lo, total + n);
    origins.push_back(lo);
    lengths.push_back(hi - lo);
    total += n;
  }
  param_offsets_ = offsets;
  slot_origins_ = origins;
  shapes_ = shapes;

  std::vector<std::vector<Tensor>> slots(params.size());
  for (std::size_t s = 0; s < specs.size(); ++s) {
    for (std::size_t p = 0; p < params.size(); ++p) {
      const bool whole = lengths[p] == numel(shapes[p]);
      const Shape shape = whole ? shapes[p] : Shape{lengths[p]};
      if (has_pending_) {
        // Restored state arrives on the host; the slot lives with its parameter.
        const Tensor& restored = pending_[1 + s * params.size() + p].second;
        if (whole && restored.device() == params[p]->value.device()) {
          slots[p].push_back(restored);
        } else {
          Tensor t(shape, dtypes[p], params[p]->value.device());
          t.copy_from(whole ? restored : held_part(restored, p));
          slots[p].push_back(std::move(t));
        }
      } else {
        Tensor t = Tensor::zeros(shape, dtypes[p], params[p]->value.device());
        if (specs[s].initial_value != 0.0 && t.numel() > 0) t.fill(specs[s].initial_value);
        slots[p].push_back(std::move(t));
      }
    }
  }
  param_names_ = std::move(names);
  shapes_ = std::move(shapes);
  dtypes_ = std::move(dtypes);
  slots_ = std::move(slots);
  pack_slots();
  pending_.clear();
  has_pending_ = false;
  built_ = true;
}

void Optimizer::pack_slots() {
  if (slots_.empty()) return;
  const std::size_t kinds = slots_.front().size();
  for (std::size_t s = 0; s < kinds; ++s) {
    // Runs of consecutive parameters in one memory and dtype share a buffer.
    std::size_t first = 0;
    while (first < slots_.size()) {
      const Tensor& head = slots_[first][s];
      std::size_t last = first;
      std::int64_t total = 0;
      while (last < slots_.size() && slots_[last][s].dtype() == head.dtype() &&
             (slots_[last][s].device() == head.device() ||
              (slots_[last][s].device().is_cpu() && head.device().is_cpu()))) {
        total += slots_[last][s].numel();
        ++last;
      }
      Tensor buffer({total}, head.dtype(), head.device());
      std::int64_t offset = 0;
      for (std::size_t p = first; p < last; ++p) {
        Tensor& slot = slots_[p][s];
        Tensor view = buffer.rows(offset, offset + slot.numel()).reshape(slot.shape());
        view.copy_from(slot);
        offset += slot.numel();
        slot = std::move(view);
      }
      first = last;
    }
  }
}

void Optimizer::check_matches(const std::vector<Parameter*>& params) const {
  MDTRAIN_CHECK(params.size() == shapes_.size(), std::invalid_argument, "[optim] ", name_, " was built for ",
                shapes_.size(), " trainable parameters but got ", params.size(),
                "; create a new optimizer for a different parameter list");
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& v = params[i]->value;
    MDTRAIN_CHECK(v.shape() == shapes_[i] && v.dtype() == dtypes_[i], std::invalid_argument, "[optim] ", name_,
                  ": trainable parameter ", i, " ('", params[i]->name, "') has shape ", to_string(v.shape()), " ",
                  name_of(v.dtype()), " but the optimizer was built with ", to_string(shapes_[i]), " ",
                  name_of(dtypes_[i]), " ('", param_names_[i], "')");
  }
}

std::int64_t Optimizer::total_size() const {
  std::int64_t n = 0;
  for (const auto& s : shapes_) n += numel(s);
  return n;
}

bool Optimizer::holds_whole(std::size_t p) const {
  return slots_.empty() || slots_[p].empty() || slots_[p].front().numel() == numel(shapes_[p]);
}

Tensor Optimizer::held_part(const Tensor& whole, std::size_t p) const {
  const std::int64_t n = numel(shapes_[p]);
  const std::int64_t first = slot_origins_[p] - param_offsets_[p];
  const std::int64_t length = std::clamp(held_end_, slot_origins_[p], param_offsets_[p] + n) - slot_origins_[p];
  return whole.reshape({n}).rows(first, first + length);
}

void Optimizer::hold_only(std::int64_t begin, std::int64_t end) {
  MDTRAIN_CHECK(0 <= begin && begin <= end, std::invalid_argument, "[optim] hold_only: bad element range [", begin,
                ", ", end, ")");
  if (built_) {
    // Re-cut the built slots: keep their values through the whole state, rebuilt at next use.
    State whole = state();
    built_ = false;
    slots_.clear();
    pending_ = std::move(whole);
    has_pending_ = true;
  }
  held_begin_ = begin;
  held_end_ = end;
}

std::int64_t Optimizer::state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& slots : slots_)
    for (const Tensor& slot : slots) bytes += static_cast<std::int64_t>(slot.nbytes());
  return bytes;
}

void Optimizer::apply(const ParameterList& params) { apply_range(params, 0, std::numeric_limits<std::int64_t>::max()); }

void Optimizer::apply(const ParameterList& params, std::int64_t begin, std::int64_t end) {
  MDTRAIN_CHECK(0 <= begin && begin <= end, std::invalid_argument, "[optim] apply: bad element range [", begin, ", ",
                end, ")");
  apply_range(params, begin, end);
}

void Optimizer::apply_range(const ParameterList& params, std::int64_t begin, std::int64_t end) {
  std::vector<Parameter*> vars = trainable(params);
  for (Parameter* p : vars) {
    MDTRAIN_CHECK(p->grad.defined() && p->grad.shape() == p->value.shape() && p->grad.dtype() == p->value.dtype(),
                  std::invalid_argument, "[optim] gradient of '", p->name, "' has shape ",
                  p->grad.defined() ? to_string(p->grad.shape()) : "undefined", " ",
                  p->grad.defined() ? name_of(p->grad.dtype()) : "", " but the value has ", to_string(p->value.shape()),
                  " ", name_of(p->value.dtype()));
  }
  build_from(vars);  // checks the list against the built one when already built

  const double lr = current_learning_rate();
  MDTRAIN_CHECK(!std::isnan(lr), std::invalid_argument, "[optim] ", name_, ": the learning rate at iteration ",
                iterations_, " is NaN");
  const double inf = std::numeric_limits<double>::infinity();

  // Per-variable gradient factors, as Keras's _clip_gradients.
  std::vector<double> scale(vars.size(), 1.0);
  if (options_.clipnorm) {
    const double c = *options_.clipnorm;
    for (std::size_t i = 0; i < vars.size(); ++i) {
      const double l2sum = ops::sum_of_squares(vars[i]->grad);
      const double l2norm = l2sum > 0 ? std::sqrt(l2sum) : l2sum;
      scale[i] = c / std::max(l2norm, c);
      if (std::isnan(l2norm)) scale[i] = l2norm;  // std::max would drop the NaN
    }
  } else if (options_.global_clipnorm) {
    const double c = *options_.global_clipnorm;
    double total = 0;
    for (Parameter* p : vars) total += ops::sum_of_squares(p->grad);
    const double use_norm = std::sqrt(total);
    // (use_norm - use_norm) turns an infinite or NaN norm into a NaN scale, as Keras does.
    const double s = c * std::min(1.0 / use_norm, 1.0 / c) + (use_norm - use_norm);
    std::fill(scale.begin(), scale.end(), s);
  }
  const double clip_value = options_.clipvalue ? *options_.clipvalue : inf;
  const double wd = options_.weight_decay ? *options_.weight_decay : 0.0;

  // One op call per (memory, dtype): the host, or one GPU. Ranges that continue each other
  // (packed parameters and slots) are merged into one segment.
  const int slot_count = slots_.empty() ? 0 : static_cast<int>(slots_.front().size());
  std::vector<StepUpdate> steps;
  auto step_for = [&](const Tensor& value) -> StepUpdate& {
    for (StepUpdate& step : steps)
      if (step.dtype == value.dtype() &&
          (step.device == value.device() || (step.device.is_cpu() && value.device().is_cpu())))
        return step;
    steps.push_back(StepUpdate{value.device(), value.dtype(), {}, lr, iterations_, clip_value});
    return steps.back();
  };
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const std::int64_t n = vars[i]->value.numel();
    const std::int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
    if (lo < hi) {
      Tensor& value = vars[i]->value;
      const std::size_t at = static_cast<std::size_t>(lo - offset) * size_of(value.dtype());
      ops::UpdateSegment seg;
      seg.value = static_cast<char*>(value.raw()) + at;
      seg.grad = static_cast<const char*>(vars[i]->grad.raw()) + at;
      if (slot_count > 0) {
        MDTRAIN_CHECK(lo >= slot_origins_[i] && hi <= slot_origins_[i] + slots_[i][0].numel(), std::logic_error,
                      "[optim] ", name_, ": elements [", lo, ", ", hi, ") are outside the held range [", held_begin_,
                      ", ", held_end_, ")");
      }
      const std::size_t slot_at = static_cast<std::size_t>(lo - slot_origins_[i]) * size_of(value.dtype());
      for (int s = 0; s < slot_count && s < 3; ++s) seg.slots[s] = static_cast<char*>(slots_[i][s].raw()) + slot_at;
      seg.size = hi - lo;
      seg.grad_scale = scale[i];
      seg.decay = (wd != 0.0 && uses_weight_decay(vars[i]->name)) ? wd * lr : 0.0;
      step_for(value).segments.push_back(seg);
    }
    offset += n;
  }
  for (StepUpdate& step : steps) {
    step.segments = ops::merge_contiguous(step.segments, step.dtype, slot_count);
    update(step);
  }
  ++iterations_;
}

Optimizer::State Optimizer::state() const {
  Tensor it = Tensor::zeros({}, DType::Int64);
  it.data<std::int64_t>()[0] = iterations_;
  State out;
  out.emplace_back("iterations", it);
  if (!built_) {
    for (std::size_t i = 1; i < pending_.size(); ++i) out.emplace_back(pending_[i].first, pending_[i].second.clone());
    return out;
  }
  auto specs = slot_specs();
  for (std::size_t s = 0; s < specs.size(); ++s)
    for (std::size_t p = 0; p < slots_.size(); ++p) {
      if (holds_whole(p)) {
        out.emplace_back(param_names_[p] + "/" + specs[s].name, host_copy(slots_[p][s]));
      } else {
        Tensor whole = Tensor::zeros(shapes_[p], dtypes_[p]);  // zero outside the held range
        Tensor part = held_part(whole, p);
        part.copy_from(slots_[p][s]);
        out.emplace_back(param_names_[p] + "/" + specs[s].name, std::move(whole));
      }
    }
  return out;
}

Optimizer::State Optimizer::carried_state(const State& previous, const ParameterList& params) const {
  MDTRAIN_CHECK(!previous.empty() && previous[0].first == "iterations", std::invalid_argument, "[optim] ", name_,
                ": a state to carry must start with 'iterations'");
  State out;
  out.emplace_back("iterations", previous[0].second.clone());
  const std::vector<Parameter*> kept = trainable(params);
  for (const auto& spec : slot_specs())
    for (const Parameter* p : kept) {
      const std::string name = p->name + "/" + spec.name;
      const Tensor* old = nullptr;
      for (const auto& [n, t] : previous)
        if (n == name && t.shape() == p->value.shape() && t.dtype() == p->value.dtype()) old = &t;
      if (old != nullptr) {
        out.emplace_back(name, old->clone());
        continue;
      }
      Tensor t = Tensor::zeros(p->value.shape(), p->value.dtype());
      if (spec.initial_value != 0.0 && t.numel() > 0) t.fill(spec.initial_value);
      out.emplace_back(name, std::move(t));
    }
  return out;
}

void Optimizer::set_state(const State& state) {
  MDTRAIN_CHECK(!state.empty() && state[0].first == "iterations", std::invalid_argument, "[optim] ", name_,
                ": state must start with 'iterations'",
                state.empty() ? std::string(" (it is empty)") : ", got '" + state[0].first + "'");
  const Tensor& it = state[0].second;
  MDTRAIN_CHECK(it.defined() && it.numel() == 1 && it.dtype() == DType::Int64, std::invalid_argument, "[optim] ", name_,
                ": state 'iterations' must be one int64 value");
  const std::int64_t iterations = it.data<std::int64_t>()[0];
  MDTRAIN_CHECK(iterations >= 0, std::invalid_argument, "[optim] ", name_, ": state 'iterations' must be >= 0, got ",
                iterations);

  if (built_) {
    validate_slots(state, state_names(param_names_), shapes_, dtypes_);
    const std::size_t n = slots_.size();
    for (std::size_t i = 1; i < state.size(); ++i) {
      const std::size_t p = (i - 1) % n;
      Tensor& slot = slots_[p][(i - 1) / n];
      slot.copy_from(holds_whole(p) ? state[i].second : held_part(state[i].second, p));
    }
  } else {
    State copy;
    for (const auto& [name, t] : state) {
      MDTRAIN_CHECK(t.defined(), std::invalid_argument, "[optim] ", name_, ": state entry '", name, "' is undefined");
      copy.emplace_back(name, t.clone());
    }
    pending_ = std::move(copy);
    has_pending_ = true;
  }
  iterations_ = iterations;
}

Json Optimizer::config() const {
  Json c = Json::object();
  c.set("name", name_);
  c.set("learning_rate", learning_rate_.config());
  c.set("weight_decay", optional_json(options_.weight_decay));
  c.set("clipnorm", optional_json(options_.clipnorm));
  c.set("global_clipnorm", optional_json(options_.global_clipnorm));
  c.set("clipvalue", optional_json(options_.clipvalue));
  // Keras keys for features mdtrain does not have, at the values that mean "off".
  c.set("use_ema", false);
  c.set("ema_momentum", 0.99);
  c.set("ema_overwrite_frequency", Json());
  c.set("loss_scale_factor", Json());
  c.set("gradient_accumulation_steps", Json());
  return c;
}

// ---- ConfigReader ----------------------------------------------------------------------------

ConfigReader::ConfigReader(const Json& config, std::string what) : config_(config), what_(std::move(what)) {
  MDTRAIN_CHECK(config_.is_object(), std::invalid_argument, "[optim] ", what_, " config must be a JSON object, got ",
                config_.dump());
}

const Json* ConfigReader::raw(const std::string& key) {
  used_.push_back(key);
  if (!config_.contains(key)) return nullptr;
  return &config_.at(key);
}

double ConfigReader::number(const std::string& key, double fallback) {
  const Json* v = raw(key);
  if (!v || v->is_null()) return fallback;
  MDTRAIN_CHECK(v->is_number(), std::invalid_argument, "[optim] ", what_, ": '", key, "' must be a number, got ",
                v->dump());
  return v->as_number();
}

double ConfigReader::required_number(const std::string& key) {
  const Json* v = raw(key);
  MDTRAIN_CHECK(v && !v->is_null(), std::invalid_argument, "[optim] ", what_, ": missing '", key, "'");
  return number(key, 0.0);
}

std::optional<double> ConfigReader::optional_number(const std::string& key) {
  const Json* v = raw(key);
  if (!v || v->is_null()) return std::nullopt;
  MDTRAIN_CHECK(v->is_number(), std::invalid_argument, "[optim] ", what_, ": '", key,
                "' must be a number or null, got ", v->dump());
  return v->as_number();
}

bool ConfigReader::boolean(const std::string& key, bool fallback) {
  const Json* v = raw(key);
  if (!v || v->is_null()) return fallback;
  MDTRAIN_CHECK(v->is_bool(), std::invalid_argument, "[optim] ", what_, ": '", key, "' must be true or false, got ",
                v->dump());
  return v->as_bool();
}

std::string ConfigReader::string(const std::string& key, const std::string& fallback) {
  const Json* v = raw(key);
  if (!v || v->is_null()) return fallback;
  MDTRAIN_CHECK(v->is_string(), std::invalid_argument, "[optim] ", what_, ": '", key, "' must be a string, got ",
                v->dump());
  return v->as_string();
}

OptimizerOptions ConfigReader::base_options() {
  OptimizerOptions o;
  o.name = string("name", "");
  o.weight_decay = optional_number("weight_decay");
  o.clipnorm = optional_number("clipnorm");
  o.clipvalue = optional_number("clipvalue");
  o.global_clipnorm = optional_number("global_clipnorm");
  MDTRAIN_CHECK(!boolean("use_ema", false), std::invalid_argument, "[optim] ", what_,
                ": use_ema=true is not supported");
  number("ema_momentum", 0.99);  // meaningless without use_ema
  for (const char* key : {"ema_overwrite_frequency", "loss_scale_factor", "gradient_accumulation_steps"}) {
    const Json* v = raw(key);
    MDTRAIN_CHECK(!v || v->is_null(), std::invalid_argument, "[optim] ", what_, ": ", key, " is not supported (got ",
                  v ? v->dump() : "", ")");
  }
  return o;
}

LearningRate ConfigReader::learning_rate(double fallback) {
  const Json* v = raw("learning_rate");
  if (!v || v->is_null()) return LearningRate(fallback);
  return LearningRate::from_config(*v);
}

void ConfigReader::finish() const {
  for (const auto& [key, value] : config_.as_object()) {
    (void)value;
    MDTRAIN_CHECK(std::find(used_.begin(), used_.end(), key) != used_.end(), std::invalid_argument, "[optim] ", what_,
                  ": argument '", key, "' not recognized");
  }
}

}  // namespace mdtrain
