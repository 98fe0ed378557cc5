#include "mdtrain/model/model.h"

#include <cmath>
#include <new>
#include <optional>

#include "mdtrain/core/allocation_budget.h"
#include "mdtrain/core/rng.h"
#include "mdtrain/model/functional_config.h"
#include "mdtrain/model/model_file.h"
#include "mdtrain/model/output_metric.h"
#include "mdtrain/nn/multi_output_loss.h"
#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/one_device_strategy.h"

namespace mdtrain {

class Model::BusyGuard {
 public:
  BusyGuard(Model& model, const char* what) : model_(model) {
    std::lock_guard<std::mutex> lock(model.busy_mutex_);
    const auto me = std::this_thread::get_id();
    MDTRAIN_CHECK(model.busy_depth_ == 0 || model.busy_owner_ == me, std::runtime_error, "[model] ", what, ": model \"",
                  model.name_,
                  "\" is busy: another thread is running fit, evaluate, predict or "
                  "train_on_batch on it (a model runs one at a time; give each thread its own model)");
    model.busy_owner_ = me;
    ++model.busy_depth_;
  }
  ~BusyGuard() {
    std::lock_guard<std::mutex> lock(model_.busy_mutex_);
    --model_.busy_depth_;
  }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  Model& model_;
};

Model::Model(std::string name, std::uint64_t seed) : name_(std::move(name)), seed_(seed) {
  MDTRAIN_CHECK(seed <= kMaxSeed, std::invalid_argument, "[sequential] model \"", name_,
                "\": seed must be below 2^53 (it is saved as a JSON number), got ", seed);
  auto stack = std::make_unique<LayerStack>();
  stack_ = stack.get();
  network_ = std::move(stack);
}

Model::Model(std::string name, std::uint64_t seed, std::unique_ptr<LayerGraph> graph,
             std::vector<std::string> input_names)
    : name_(std::move(name)), seed_(seed), input_names_(std::move(input_names)) {
  MDTRAIN_CHECK(seed <= kMaxSeed, std::invalid_argument, "[functional] model \"", name_,
                "\": seed must be below 2^53 (it is saved as a JSON number), got ", seed);
  MDTRAIN_CHECK(graph != nullptr, std::invalid_argument, "[functional] model \"", name_, "\" needs a graph");
  MDTRAIN_CHECK(input_names_.size() == static_cast<std::size_t>(graph->num_inputs()), std::invalid_argument,
                "[functional] model \"", name_, "\" has ", graph->num_inputs(), " inputs but ", input_names_.size(),
                " input names");
  graph->build(seed_);
  graph_ = graph.get();
  network_ = std::move(graph);
}

Network& Model::network() {
  refresh_weights();
  return *network_;
}

LayerGraph& Model::graph() {
  MDTRAIN_CHECK(graph_ != nullptr, std::logic_error, "[model] model \"", name_, "\" is not a functional model");
  refresh_weights();
  return *graph_;
}

void Model::add(std::shared_ptr<Layer> layer) {
  BusyGuard busy(*this, "add");
  MDTRAIN_CHECK(stack_ != nullptr, std::logic_error, "[functional] model \"", name_,
                "\" is a functional model: its layers come from its inputs and outputs, not add()");
  reshape_network([&] { stack_->add(std::move(layer)); });
}

std::shared_ptr<Layer> Model::pop() {
  BusyGuard busy(*this, "pop");
  MDTRAIN_CHECK(stack_ != nullptr, std::logic_error, "[functional] model \"", name_,
                "\" is a functional model: its layers come from its inputs and outputs, not pop()");
  std::shared_ptr<Layer> popped;
  reshape_network([&] { popped = stack_->pop(); });
  return popped;
}

void Model::reshape_network(const std::function<void()>& change) {
  // A compiled model keeps its optimizer's state for the weights that stay (Keras's optimizer
  // holds its variables per model variable); the replicas are made again from the new network.
  std::optional<Optimizer::State> previous;
  if (optimizer_ != nullptr && network_->built()) previous = optimizer_state();
  release_engine();
  change();
  if (previous && network_->built())
    optimizer_->set_state(optimizer_->carried_state(*previous, network_->parameters()));
}

void Model::build(const Shape& input_shape) {
  BusyGuard busy(*this, "build");
  if (network_->built()) {
    MDTRAIN_CHECK(network_->input_shape() == input_shape, std::invalid_argument, "[sequential] model \"", name_,
                  "\" is already built for input shape ", to_string(network_->input_shape()), ", not ",
                  to_string(input_shape));
    return;
  }
  release_engine();
  stack_->build(input_shape, seed_);
}

void Model::compile(std::shared_ptr<Loss> loss, std::shared_ptr<Optimizer> optimizer, std::vector<std::string> metrics,
                    std::shared_ptr<Strategy> strategy, std::vector<int> metric_outputs) {
  BusyGuard busy(*this, "compile");
  MDTRAIN_CHECK(loss != nullptr, std::invalid_argument, "[compile] model \"", name_, "\": a loss is required");
  MDTRAIN_CHECK(optimizer != nullptr, std::invalid_argument, "[compile] model \"", name_,
                "\": an optimizer is required");
  const auto* multi = dynamic_cast<const MultiOutputLoss*>(loss.get());
  if (multi) {
    MDTRAIN_CHECK(metric_outputs.size() == metrics.size(), std::invalid_argument, "[compile] model \"", name_,
                  "\": ", metrics.size(), " metrics but ", metric_outputs.size(), " metric outputs");
    for (int k : metric_outputs)
      MDTRAIN_CHECK(k >= 0 && static_cast<std::size_t>(k) < multi->outputs().size(), std::invalid_argument,
                    "[compile] model \"", name_, "\": a metric reads output ", k, " of ", multi->outputs().size());
    if (graph_ != nullptr && graph_->built()) {
      const auto shapes = graph_->output_shapes();
      MDTRAIN_CHECK(shapes.size() == multi->outputs().size(), std::invalid_argument, "[compile] model \"", name_,
                    "\" has ", shapes.size(), " outputs but the loss has ", multi->outputs().size());
      for (std::size_t k = 0; k < shapes.size(); ++k)
        MDTRAIN_CHECK(shapes[k] == multi->outputs()[k].pred_shape, std::invalid_argument, "[compile] model \"", name_,
                      "\": output ", k, " ('", multi->outputs()[k].name, "') has shape ", to_string(shapes[k]),
                      ", not ", to_string(multi->outputs()[k].pred_shape));
    }
  } else {
    MDTRAIN_CHECK(metric_outputs.empty(), std::invalid_argument, "[compile] model \"", name_,
                  "\": metric outputs need a multi-output loss");
  }
  loss_ = std::move(loss);
  optimizer_ = std::move(optimizer);
  metric_names_ = std::move(metrics);
  metric_outputs_ = std::move(metric_outputs);
  metrics_.clear();
  metrics_resolved_ = false;
  strategy_ = strategy ? std::move(strategy) : std::make_shared<OneDeviceStrategy>();
  release_engine();
  network_->repack_parameters();  // layers frozen or unfrozen since the last compile (Keras's rule)
}

const Loss& Model::loss() const {
  MDTRAIN_CHECK(loss_ != nullptr, std::logic_error, "[model] model \"", name_,
                "\" must be compiled first: call compile(optimizer, loss)");
  return *loss_;
}

Optimizer& Model::optimizer() {
  MDTRAIN_CHECK(optimizer_ != nullptr, std::logic_error, "[model] model \"", name_,
                "\" must be compiled first: call compile(optimizer, loss)");
  return engine_ ? engine_->optimizer() : *optimizer_;
}

void Model::set_learning_rate(double lr) {
  optimizer();  // throws if not compiled
  optimizer_->set_learning_rate(lr);
  if (engine_) engine_->set_learning_rate(lr);
}

Optimizer::State Model::optimizer_state() { return engine_ ? engine_->optimizer_state() : optimizer().state(); }

void Model::set_optimizer_state(const Optimizer::State& state) {
  BusyGuard busy(*this, "set_optimizer_state");
  MDTRAIN_CHECK(optimizer_ != nullptr, std::logic_error, "[model] model \"", name_,
                "\" must be compiled before its optimizer state is set");
  optimizer_->set_state(state);
  // The replicas' optimizers are clones made with the engine: make them again from this state
  // (and the current weights) on next use.
  release_engine();
}

void Model::release_engine() {
  if (engine_) engine_->refresh_primary();
  engine_.reset();
}

void Model::refresh_weights() {
  reclaim_weights();
  if (engine_) engine_->refresh_primary();
}

void Model::reclaim_weights() {
  if (!network_->built()) return;
  const auto& values = network_->packed_values().storage();
  const auto& fixed = network_->non_trainable_values().storage();
  bool packed_here = true;
  for (const auto* p : network_->parameters())
    packed_here = packed_here && (p->value.storage() == values || p->value.storage() == fixed);
  if (packed_here) return;
  engine_.reset();  // its buffers hold nothing newer than the layers' weights: they are not read
  network_->repack_parameters();
}

LayerStack& Model::stack() {
  MDTRAIN_CHECK(stack_ != nullptr, std::logic_error, "[model] model \"", name_,
                "\" is a functional model, not a Sequential one");
  refresh_weights();
  return *stack_;
}

TrainEngine& Model::engine(const Shape& y_shape) {
  BusyGuard busy(*this, "engine");
  loss();  // throws if not compiled
  MDTRAIN_CHECK(network_->built(), std::logic_error, "[model] model \"", name_,
                "\" is not built: train it on data or call build(input_shape)");
  reclaim_weights();
  if (!engine_) {
    engine_ = std::make_unique<TrainEngine>(*network_, strategy_, *loss_, *optimizer_);
    if (!metrics_.empty()) engine_->set_metrics(metrics_);
  }
  // Metric names like "accuracy" resolve against the label shape, known with the first labels.
  if (auto multi = std::dynamic_pointer_cast<const MultiOutputLoss>(loss_); multi && !metrics_resolved_) {
    // Every output's label shape is the loss's: "<output>_loss" first, then the metrics.
    metrics_resolved_ = true;
    for (std::size_t k = 0; k < multi->outputs().size(); ++k)
      metrics_.push_back(std::make_unique<OutputLossMetric>(multi, k));
    for (std::size_t i = 0; i < metric_names_.size(); ++i) {
      const auto k = static_cast<std::size_t>(metric_outputs_[i]);
      const auto& out = multi->outputs()[k];
      Shape true_shape{-1}, pred_shape{-1};
      for (auto d : multi->label_shape(k)) true_shape.push_back(d);
      for (auto d : out.pred_shape) pred_shape.push_back(d);
      metrics_.push_back(
          std::make_unique<OutputMetric>(multi, k,
                                         make_metric(metric_names_[i], out.loss.get(), true_shape, pred_shape)));
    }
    engine_->set_metrics(metrics_);
  }
  if (!metrics_resolved_ && !y_shape.empty()) {
    metrics_resolved_ = true;
    Shape pred_shape{-1};
    for (auto d : network_->output_shape()) pred_shape.push_back(d);
    Shape true_shape = y_shape;
    true_shape[0] = -1;
    for (const auto& name : metric_names_) metrics_.push_back(make_metric(name, loss_.get(), true_shape, pred_shape));
    engine_->set_metrics(metrics_);
  }
  return *engine_;
}

void Model::check_data(const Tensor& x, const Tensor* y, const char* where, const Tensor* sample_weight) const {
  MDTRAIN_CHECK(x.ndim() >= 1, std::invalid_argument, "[", where, "] x must have a batch axis, got shape ",
                to_string(x.shape()));
  if (y) {
    MDTRAIN_CHECK(y->ndim() >= 1 && y->dim(0) == x.dim(0), std::invalid_argument, "[", where,
                  "] x and y must have the same number of samples, got x ", to_string(x.shape()), " and y ",
                  to_string(y->shape()));
  }
  if (sample_weight) {
    MDTRAIN_CHECK(sample_weight->defined() && sample_weight->dtype() == DType::Float32 && sample_weight->ndim() == 1 &&
                      sample_weight->dim(0) == x.dim(0) && sample_weight->device().is_cpu(),
                  std::invalid_argument, "[", where, "] sample_weight must be a float32 host array of shape (",
                  x.dim(0), ",), one weight per sample of x, got ",
                  sample_weight->defined()
                      ? cat(name_of(sample_weight->dtype()), " of shape ", to_string(sample_weight->shape()))
                      : std::string("an undefined tensor"));
  }
}

void Model::ensure_built_for(const Tensor& x) {
  if (!network_->built()) build(Shape(x.shape().begin() + 1, x.shape().end()));
}

Model::EpochResult Model::train_epoch(const Tensor& x, const Tensor& y, const std::int64_t* order,
                                      std::int64_t order_size, std::int64_t batch_size, std::int64_t steps,
                                      const BatchCallback& on_batch_end, const Tensor* sample_weight) {
  BusyGuard busy(*this, "fit");
  MDTRAIN_CHECK(batch_size > 0, std::invalid_argument, "[fit] batch_size must be a positive integer, got ", batch_size);
  MDTRAIN_CHECK(order_size > 0, std::invalid_argument, "[fit] no training data: x has ", x.dim(0), " samples");
  // steps may exceed one pass (steps_per_epoch): the order is then read cyclically, batch by
  // batch, as the arrays' epochs succeed each other.
  std::vector<std::int64_t> cyclic;
  std::vector<std::int64_t> offsets{0};
  const std::int64_t* rows = order;
  const bool wraps = steps * batch_size > order_size;
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::int64_t begin = (s * batch_size) % order_size;
    const std::int64_t count = std::min(batch_size, order_size - begin);
    if (wraps) cyclic.insert(cyclic.end(), order + begin, order + begin + count);
    offsets.push_back(offsets.back() + count);
  }
  if (wraps) rows = cyclic.data();
  return train_batches(x, y, rows, offsets, on_batch_end, true, 0, sample_weight);
}

Model::EpochResult Model::train_batches(const Tensor& x, const Tensor& y, const std::int64_t* order,
                                        const std::vector<std::int64_t>& offsets, const BatchCallback& on_batch_end,
                                        bool reset_metrics, std::int64_t first_batch, const Tensor* sample_weight) {
  BusyGuard busy(*this, "fit");
  check_data(x, &y, "fit", sample_weight);
  MDTRAIN_CHECK(offsets.size() >= 2, std::invalid_argument, "[fit] no training batches");
  ensure_built_for(x);
  TrainEngine& eng = engine(y.shape());
  if (reset_metrics) eng.reset_metrics();
  EpochResult result;
  const auto steps = static_cast<std::int64_t>(offsets.size()) - 1;
  // Partial metrics on each worker (Strategy::metrics_split_across_workers): every worker sums them
  // after every step, batch callbacks or not, so all show the same batch logs.
  const bool sum_step_metrics = eng.strategy().metrics_split_across_workers();
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::int64_t begin = offsets[static_cast<std::size_t>(s)];
    const std::int64_t count = offsets[static_cast<std::size_t>(s) + 1] - begin;
    const double loss = eng.train_step(x, y, order + begin, count, sample_weight);
    if (!std::isfinite(loss) && result.first_nonfinite_step < 0) result.first_nonfinite_step = s;
    result.steps = s + 1;
    if (step_hook_) step_hook_();
    if (sum_step_metrics) {
      const Logs logs = eng.logs(/*all_workers=*/true);
      if (on_batch_end && on_batch_end(first_batch + s, logs)) {
        result.stopped = true;
        break;
      }
    } else if (on_batch_end && on_batch_end(first_batch + s, eng.logs())) {
      result.stopped = true;
      break;
    }
  }
  result.logs = eng.logs(/*all_workers=*/true);
  return result;
}

Logs Model::evaluate(const Tensor& x, const Tensor& y, std::int64_t batch_size, const BatchCallback& on_batch_end,
                     const Tensor* sample_weight, bool reset_metrics) {
  BusyGuard busy(*this, "evaluate");
  check_data(x, &y, "evaluate", sample_weight);
  MDTRAIN_CHECK(batch_size > 0, std::invalid_argument, "[evaluate] batch_size must be a positive integer, got ",
                batch_size);
  MDTRAIN_CHECK(x.dim(0) > 0, std::invalid_argument, "[evaluate] no data: x has 0 samples");
  ensure_built_for(x);
  TrainEngine& eng = engine(y.shape());
  if (reset_metrics) eng.reset_metrics();
  const std::int64_t n = x.dim(0);
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) rows[static_cast<std::size_t>(i)] = i;
  for (std::int64_t begin = 0, step = 0; begin < n; begin += batch_size, ++step) {
    eng.test_step(x, y, rows.data() + begin, std::min(batch_size, n - begin), sample_weight);
    if (step_hook_) step_hook_();
    if (on_batch_end && on_batch_end(step, eng.logs())) break;
  }
  return eng.logs(/*all_workers=*/true);
}

Tensor Model::predict(const Tensor& x, std::int64_t batch_size) {
  BusyGuard busy(*this, "predict");
  check_data(x, nullptr, "predict");
  MDTRAIN_CHECK(batch_size > 0, std::invalid_argument, "[predict] batch_size must be a positive integer, got ",
                batch_size);
  ensure_built_for(x);
  Shape out_shape{x.dim(0)};
  for (auto d : network_->output_shape()) out_shape.push_back(d);
  Tensor out(out_shape, network_->dtype());
  if (!compiled()) {
    // Keras predicts with an uncompiled model too: run the stack directly on one device.
    for (std::int64_t begin = 0; begin < x.dim(0); begin += batch_size) {
      const std::int64_t end = std::min(x.dim(0), begin + batch_size);
      Tensor dst = out.rows(begin, end);
      dst.copy_from(network_->forward(x.rows(begin, end), ForwardContext{}));
    }
    return out;
  }
  TrainEngine& eng = engine();
  for (std::int64_t begin = 0; begin < x.dim(0); begin += batch_size)
    eng.predict_step(x, begin, std::min(batch_size, x.dim(0) - begin), out);
  return out;
}

Logs Model::train_on_batch(const Tensor& x, const Tensor& y, const Tensor* sample_weight) {
  BusyGuard busy(*this, "train_on_batch");
  check_data(x, &y, "train_on_batch", sample_weight);
  MDTRAIN_CHECK(x.dim(0) > 0, std::invalid_argument, "[train_on_batch] the batch is empty");
  ensure_built_for(x);
  TrainEngine& eng = engine(y.shape());
  eng.reset_metrics();
  std::vector<std::int64_t> rows(static_cast<std::size_t>(x.dim(0)));
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int64_t>(i);
  eng.train_step(x, y, rows.data(), x.dim(0), sample_weight);
  return eng.logs(/*all_workers=*/true);
}

std::vector<double> Model::replica_losses() const {
  MDTRAIN_CHECK(engine_ != nullptr, std::logic_error, "[model] no step has run yet");
  return engine_->replica_losses();
}

Logs Model::test_on_batch(const Tensor& x, const Tensor& y, const Tensor* sample_weight) {
  return evaluate(x, y, std::max<std::int64_t>(1, x.dim(0)), nullptr, sample_weight);
}

std::vector<Tensor> Model::get_weights() {
  refresh_weights();
  std::vector<Tensor> out;
  for (auto* p : network_->parameters()) out.push_back(p->value.clone());
  return out;
}

void Model::set_weights(const std::vector<Tensor>& weights) {
  BusyGuard busy(*this, "set_weights");
  refresh_weights();  // the primary must be current before it is broadcast
  auto params = network_->parameters();
  MDTRAIN_CHECK(weights.size() == params.size(), std::invalid_argument, "[set_weights] model \"", name_,
                "\" expects a list of ", params.size(), " arrays, got ", weights.size());
  for (std::size_t i = 0; i < params.size(); ++i)
    MDTRAIN_CHECK(weights[i].shape() == params[i]->value.shape(), std::invalid_argument, "[set_weights] weight ", i,
                  " (", params[i]->name, ") has shape ", to_string(params[i]->value.shape()),
                  ", got an array of shape ", to_string(weights[i].shape()));
  for (std::size_t i = 0; i < params.size(); ++i) params[i]->value.copy_from(weights[i]);
  if (engine_) engine_->broadcast_weights_from_primary();
}

void Model::abort_collectives(const std::string& reason) {
  if (engine_) engine_->abort(reason);
  if (strategy_) strategy_->abort(reason);
}

Json Model::config() const {
  if (graph_ != nullptr) return functional_config(*graph_, input_names_, name_, seed_);
  const LayerStack& stack = *stack_;
  Json layers = Json::array();
  for (const auto& l : stack.layers()) layers.push_back(layer_to_config(*l));
  Json c = Json::object();
  c.set("name", name_);
  c.set("seed", static_cast<double>(seed_));
  Json shape = Json::array();
  if (stack.built())
    for (auto d : stack.input_shape()) shape.push_back(d == kUnknownDim ? Json() : Json(d));
  c.set("input_shape", stack.built() ? shape : Json());
  c.set("layers", layers);
  Json j = Json::object();
  j.set("class_name", "Sequential");
  j.set("config", c);
  return j;
}

void Model::save(const std::string& path, const Json& metadata) {
  BusyGuard busy(*this, "save");
  ModelFile file;
  file.model = config();
  file.metadata = metadata;
  refresh_weights();
  for (auto* p : network_->parameters()) file.weights.push_back({p->name, p->value.clone()});
  if (compiled()) {
    Json compile = Json::object();
    compile.set("loss", loss_->config());
    compile.set("optimizer", serialize_optimizer(optimizer()));
    Json metrics = Json::array();
    for (const auto& m : metric_names_) metrics.push_back(m);
    compile.set("metrics", metrics);
    if (!metric_outputs_.empty()) {
      Json outputs = Json::array();
      for (int k : metric_outputs_) outputs.push_back(Json(k));
      compile.set("metric_outputs", outputs);
    }
    file.compile = compile;
    for (auto& [name, t] : optimizer_state()) file.optimizer_state.push_back({name, t});
  }
  save_model_file(path, file);
}

std::unique_ptr<Model> Model::load(const std::string& path, std::shared_ptr<Strategy> strategy, Json* metadata) {
  ModelFile file = load_model_file(path);
  // The layers are built from their configs before their weights are compared with the file's: a
  // budget from the weights the file holds (building keeps a few copies: values, gradients, packed
  // and padded buffers, optimizer slots) stops a config that claims huge layers at once.
  std::size_t weight_bytes = 0;
  for (const auto& w : file.weights) weight_bytes += w.value.nbytes();
  AllocationBudget budget(16 * weight_bytes + (std::size_t{64} << 20),
                          cat("building the model '", path, "' describes"));
  try {
    const Json& c = file.model.at("config");
    const auto seed = static_cast<std::uint64_t>(c.get("seed", 0).as_number());
    std::unique_ptr<Model> model;
    if (file.model.at("class_name").as_string() == "Functional") {
      std::vector<std::string> input_names;
      auto graph = graph_from_config(c, &input_names);
      model = std::make_unique<Model>(c.at("name").as_string(), seed, std::move(graph), std::move(input_names));
    } else {
      model = std::make_unique<Model>(c.at("name").as_string(), seed);
      for (const auto& spec : c.at("layers").as_array()) model->add(std::shared_ptr<Layer>(layer_from_config(spec)));
      if (!c.get("input_shape", Json()).is_null()) {
        Shape shape;
        for (const auto& d : c.at("input_shape").as_array()) shape.push_back(d.is_null() ? kUnknownDim : d.as_int());
        model->build(shape);
      }
    }
    if (model->built()) {
      auto params = model->network_->parameters();
      MDTRAIN_CHECK(file.weights.size() == params.size(), std::invalid_argument, "[load_model] '", path, "' holds ",
                    file.weights.size(), " weights for a model with ", params.size());
      std::vector<Tensor> weights;
      for (auto& w : file.weights) weights.push_back(w.value);
      model->set_weights(weights);
    }
    if (!file.compile.is_null()) {
      std::vector<std::string> metrics;
      for (const auto& m : file.compile.at("metrics").as_array()) metrics.push_back(m.as_string());
      std::vector<int> metric_outputs;
      const Json saved_outputs = file.compile.get("metric_outputs", Json::array());  // a copy: see loss_from_config
      for (const auto& k : saved_outputs.as_array()) metric_outputs.push_back(static_cast<int>(k.as_int()));
      model->compile(loss_from_config(file.compile.at("loss")),
                     std::shared_ptr<Optimizer>(make_optimizer(file.compile.at("optimizer"))), metrics,
                     std::move(strategy), std::move(metric_outputs));
      if (!file.optimizer_state.empty()) {
        Optimizer::State state;
        for (auto& t : file.optimizer_state) state.emplace_back(t.name, t.value);
        model->optimizer_->set_state(state);
      }
    }
    if (metadata) *metadata = file.metadata;
    return model;
  } catch (const std::invalid_argument& e) {
    fail<std::invalid_argument>("[load_model] '", path, "' holds a model this version cannot rebuild: ", e.what());
  } catch (const AllocationBudgetExceeded& e) {
    fail<std::invalid_argument>("[load_model] '", path,
                                "' is corrupt: its layer configs describe weights far "
                                "larger than the ",
                                weight_bytes, " bytes of weights it holds (", e.what(), ")");
  } catch (const AllocationError& e) {
    // The message must say which file described a model too large for this machine.
    fail<AllocationError>("[load_model] '", path, "' describes a model that does not fit in memory: ", e.what());
  } catch (const std::bad_alloc&) {
    fail<AllocationError>("[load_model] '", path, "' describes a model that does not fit in memory");
  }
}

}  // namespace mdtrain
