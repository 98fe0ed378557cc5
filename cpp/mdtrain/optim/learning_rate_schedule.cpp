#include "mdtrain/optim/learning_rate_schedule.h"

#include <algorithm>
#include <cmath>

#include "mdtrain/core/errors.h"
#include "mdtrain/optim/optimizer.h"

namespace mdtrain {

namespace {

constexpr double kPi = 3.14159265358979323846;

void check_finite(double v, const char* what) {
  MDTRAIN_CHECK(std::isfinite(v), std::invalid_argument, "[optim] ", what, " must be finite, got ", v);
}

void check_decay_steps(double v, const char* what) {
  MDTRAIN_CHECK(std::isfinite(v) && v > 0, std::invalid_argument, "[optim] ", what, " must be > 0, got ", v);
}

Json numbers(const std::vector<double>& v) {
  Json a = Json::array();
  for (double x : v) a.push_back(x);
  return a;
}

std::vector<double> read_numbers(const Json* v, const char* what) {
  MDTRAIN_CHECK(v && v->is_array(), std::invalid_argument, "[optim] PiecewiseConstantDecay: '", what,
                "' must be a list of numbers");
  std::vector<double> out;
  for (const Json& x : v->as_array()) {
    MDTRAIN_CHECK(x.is_number(), std::invalid_argument, "[optim] PiecewiseConstantDecay: '", what,
                  "' must hold numbers, got ", x.dump());
    out.push_back(x.as_number());
  }
  return out;
}

}  // namespace

LearningRateSchedule::~LearningRateSchedule() = default;

// ---- ConstantSchedule ------------------------------------------------------------------------

ConstantSchedule::ConstantSchedule(double value) : value_(value) {
  MDTRAIN_CHECK(std::isfinite(value) && value >= 0, std::invalid_argument,
                "[optim] learning_rate must be a finite number >= 0, got ", value);
}

Json ConstantSchedule::config() const {
  Json c = Json::object();
  c.set("value", value_);
  return c;
}

// ---- ExponentialDecay ------------------------------------------------------------------------

ExponentialDecay::ExponentialDecay(double initial_learning_rate, double decay_steps, double decay_rate, bool staircase,
                                   std::string name)
    : initial_learning_rate_(initial_learning_rate),
      decay_steps_(decay_steps),
      decay_rate_(decay_rate),
      staircase_(staircase),
      name_(std::move(name)) {
  check_finite(initial_learning_rate, "ExponentialDecay initial_learning_rate");
  check_decay_steps(decay_steps, "ExponentialDecay decay_steps");
  check_finite(decay_rate, "ExponentialDecay decay_rate");
}

double ExponentialDecay::operator()(std::int64_t step) const {
  double p = static_cast<double>(step) / decay_steps_;
  if (staircase_) p = std::floor(p);
  return initial_learning_rate_ * std::pow(decay_rate_, p);
}

Json ExponentialDecay::config() const {
  Json c = Json::object();
  c.set("initial_learning_rate", initial_learning_rate_);
  c.set("decay_steps", decay_steps_);
  c.set("decay_rate", decay_rate_);
  c.set("staircase", staircase_);
  c.set("name", name_);
  return c;
}

// ---- PiecewiseConstantDecay ------------------------------------------------------------------

PiecewiseConstantDecay::PiecewiseConstantDecay(std::vector<double> boundaries, std::vector<double> values,
                                               std::string name)
    : boundaries_(std::move(boundaries)), values_(std::move(values)), name_(std::move(name)) {
  MDTRAIN_CHECK(!boundaries_.empty() && boundaries_.size() + 1 == values_.size(), std::invalid_argument,
                "[optim] PiecewiseConstantDecay: the length of boundaries should be 1 less than the "
                "length of values (and at least 1); got ",
                boundaries_.size(), " boundaries and ", values_.size(), " values");
  for (std::size_t i = 1; i < boundaries_.size(); ++i)
    MDTRAIN_CHECK(boundaries_[i - 1] < boundaries_[i], std::invalid_argument,
                  "[optim] PiecewiseConstantDecay: boundaries must increase strictly; boundary ", i, " (",
                  boundaries_[i], ") follows ", boundaries_[i - 1]);
}

double PiecewiseConstantDecay::operator()(std::int64_t step) const {
  const double s = static_cast<double>(step);
  for (std::size_t i = 0; i < boundaries_.size(); ++i)
    if (s <= boundaries_[i]) return values_[i];
  return values_.back();
}

Json PiecewiseConstantDecay::config() const {
  Json c = Json::object();
  c.set("boundaries", numbers(boundaries_));
  c.set("values", numbers(values_));
  c.set("name", name_);
  return c;
}

// ---- CosineDecay -----------------------------------------------------------------------------

CosineDecay::CosineDecay(double initial_learning_rate, double decay_steps, double alpha, std::string name,
                         std::optional<double> warmup_target, double warmup_steps)
    : initial_learning_rate_(initial_learning_rate),
      decay_steps_(decay_steps),
      alpha_(alpha),
      name_(std::move(name)),
      warmup_target_(warmup_target),
      warmup_steps_(warmup_steps) {
  check_finite(initial_learning_rate, "CosineDecay initial_learning_rate");
  check_decay_steps(decay_steps, "CosineDecay decay_steps");
  check_finite(alpha, "CosineDecay alpha");
  if (warmup_target) check_finite(*warmup_target, "CosineDecay warmup_target");
  MDTRAIN_CHECK(std::isfinite(warmup_steps) && warmup_steps >= 0, std::invalid_argument,
                "[optim] CosineDecay warmup_steps must be >= 0, got ", warmup_steps);
}

double CosineDecay::operator()(std::int64_t step) const {
  auto decay = [&](double s, double from_lr) {
    const double cosine = 0.5 * (1.0 + std::cos(kPi * (s / decay_steps_)));
    return from_lr * ((1 - alpha_) * cosine + alpha_);
  };
  double s = static_cast<double>(step);
  if (!warmup_target_) return decay(std::min(s, decay_steps_), initial_learning_rate_);
  s = std::min(s, decay_steps_ + warmup_steps_);
  if (s < warmup_steps_)
    return (*warmup_target_ - initial_learning_rate_) * (s / warmup_steps_) + initial_learning_rate_;
  return decay(s - warmup_steps_, *warmup_target_);
}

Json CosineDecay::config() const {
  Json c = Json::object();
  c.set("initial_learning_rate", initial_learning_rate_);
  c.set("decay_steps", decay_steps_);
  c.set("alpha", alpha_);
  c.set("name", name_);
  c.set("warmup_target", warmup_target_ ? Json(*warmup_target_) : Json());
  c.set("warmup_steps", warmup_steps_);
  return c;
}

// ---- serialisation ---------------------------------------------------------------------------

Json serialize_schedule(const LearningRateSchedule& schedule) {
  Json j = Json::object();
  j.set("module", "keras.optimizers.schedules");
  j.set("class_name", schedule.class_name());
  j.set("config", schedule.config());
  j.set("registered_name", Json());
  return j;
}

std::shared_ptr<const LearningRateSchedule> schedule_from_config(const Json& config) {
  MDTRAIN_CHECK(config.is_object() && config.contains("class_name") && config.at("class_name").is_string(),
                std::invalid_argument, "[optim] a learning rate schedule config needs a string 'class_name', got ",
                config.dump());
  const std::string& cls = config.at("class_name").as_string();
  static const Json empty = Json::object();
  const Json& cfg = config.contains("config") ? config.at("config") : empty;
  ConfigReader r(cfg, cls);
  std::shared_ptr<const LearningRateSchedule> out;
  if (cls == "ExponentialDecay") {
    const double lr0 = r.required_number("initial_learning_rate");
    const double steps = r.required_number("decay_steps");
    const double rate = r.required_number("decay_rate");
    const bool staircase = r.boolean("staircase", false);
    out = std::make_shared<ExponentialDecay>(lr0, steps, rate, staircase, r.string("name", "ExponentialDecay"));
  } else if (cls == "PiecewiseConstantDecay") {
    auto boundaries = read_numbers(r.raw("boundaries"), "boundaries");
    auto values = read_numbers(r.raw("values"), "values");
    out = std::make_shared<PiecewiseConstantDecay>(std::move(boundaries), std::move(values),
                                                   r.string("name", "PiecewiseConstant"));
  } else if (cls == "CosineDecay") {
    const double lr0 = r.required_number("initial_learning_rate");
    const double steps = r.required_number("decay_steps");
    const double alpha = r.number("alpha", 0.0);
    std::string name = r.string("name", "CosineDecay");
    auto target = r.optional_number("warmup_target");
    const double warmup_steps = r.number("warmup_steps", 0.0);
    out = std::make_shared<CosineDecay>(lr0, steps, alpha, std::move(name), target, warmup_steps);
  } else if (cls == "Constant") {
    out = std::make_shared<ConstantSchedule>(r.required_number("value"));
  } else {
    fail<std::invalid_argument>("[optim] unknown learning rate schedule '", cls,
                                "'; known: ExponentialDecay, PiecewiseConstantDecay, CosineDecay");
  }
  r.finish();
  return out;
}

// ---- LearningRate ----------------------------------------------------------------------------

LearningRate::LearningRate(double value) : schedule_(std::make_shared<ConstantSchedule>(value)) {}

LearningRate::LearningRate(std::shared_ptr<const LearningRateSchedule> schedule) : schedule_(std::move(schedule)) {
  MDTRAIN_CHECK(schedule_ != nullptr, std::invalid_argument, "[optim] learning rate schedule must not be null");
}

bool LearningRate::is_constant() const { return dynamic_cast<const ConstantSchedule*>(schedule_.get()) != nullptr; }

Json LearningRate::config() const {
  if (auto* c = dynamic_cast<const ConstantSchedule*>(schedule_.get())) return Json(c->value());
  return serialize_schedule(*schedule_);
}

LearningRate LearningRate::from_config(const Json& value) {
  if (value.is_number()) return LearningRate(value.as_number());
  MDTRAIN_CHECK(value.is_object(), std::invalid_argument,
                "[optim] learning_rate must be a number or a schedule config, got ", value.dump());
  return LearningRate(schedule_from_config(value));
}

}  // namespace mdtrain
