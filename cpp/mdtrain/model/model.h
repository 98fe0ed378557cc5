#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mdtrain/model/logs.h"
#include "mdtrain/model/metric.h"
#include "mdtrain/model/train_engine.h"
#include "mdtrain/nn/layer_graph.h"
#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/optimizer.h"
#include "mdtrain/strategy/strategy.h"

namespace mdtrain {

// keras.Sequential and keras.Model (functional) for the C++ API and the engine behind the Python
// ones: a Network (a LayerStack, or a LayerGraph), compile state and the training loops (fit's
// epoch loop, evaluate, predict) with their batching in C++.
//
// One loop at a time: while a thread runs a loop or changes the model (add, build, compile,
// set_weights, ...), another thread doing the same gets std::runtime_error("[model] ... is busy")
// instead of corrupting it. The running thread may re-enter (a callback that evaluates or saves
// between steps).
class Model {
 public:
  // Called after each batch with the batch index and the running logs; returning true stops.
  using BatchCallback = std::function<bool(std::int64_t batch, const Logs& logs)>;

  struct EpochResult {
    Logs logs;                               // running means at the end of the epoch
    std::int64_t steps = 0;                  // steps actually run
    std::int64_t first_nonfinite_step = -1;  // first step whose loss was NaN or infinite
    bool stopped = false;                    // the callback asked to stop
  };

  explicit Model(std::string name = "sequential", std::uint64_t seed = 0);
  // A functional model: `graph` (nodes and outputs set, not built) is built here from `seed`;
  // its inputs are named `input_names` in the architecture (Keras's InputLayers).
  Model(std::string name, std::uint64_t seed, std::unique_ptr<LayerGraph> graph, std::vector<std::string> input_names);

  // Called between any two steps of the training and evaluation loops, on the calling thread; it
  // may throw to abandon the loop (the Python bindings use it to honour Ctrl-C). Empty: none.
  void set_step_hook(std::function<void()> hook) { step_hook_ = std::move(hook); }

  const std::string& name() const { return name_; }
  std::uint64_t seed() const { return seed_; }
  // The model's layers and host weights. After training on GPUs this refreshes the host weights
  // from the replicas first (TrainEngine::refresh_primary); call it again after more training
  // rather than keeping the reference across steps.
  LayerStack& stack();
  // The same for any model: its Network (a LayerStack or a LayerGraph).
  Network& network();
  // The graph of a functional model (std::logic_error for a Sequential one).
  LayerGraph& graph();
  bool is_functional() const { return graph_ != nullptr; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  // Brings the host weights up to date with the replicas (a copy from GPU replica 0 when training
  // ran since the last one; nothing on CPU devices). Every accessor of the weights calls it.
  void refresh_weights();
  void add(std::shared_ptr<Layer> layer);
  // Sequential.pop: removes and returns the last layer (LayerStack::pop). add and pop keep a
  // compiled model compiled, with its optimizer's state for the weights that stay.
  std::shared_ptr<Layer> pop();
  void build(const Shape& input_shape);
  bool built() const { return network_->built(); }

  // Replaces any earlier compile. `metrics` are Keras names ("accuracy", "mae", ...), resolved
  // against the loss and the model's output shape once the model is built. With a
  // MultiOutputLoss, `metric_outputs[i]` is the output metrics[i] reads (logged as
  // "<output>_<metric>", after each output's "<output>_loss"); empty otherwise.
  void compile(std::shared_ptr<Loss> loss, std::shared_ptr<Optimizer> optimizer, std::vector<std::string> metrics,
               std::shared_ptr<Strategy> strategy, std::vector<int> metric_outputs = {});
  bool compiled() const { return loss_ != nullptr; }
  const Loss& loss() const;
  Optimizer& optimizer();
  // Changes the learning rate of the optimizer on every replica.
  void set_learning_rate(double lr);
  // The optimizer's whole state (with several replicas, stitched from their shards).
  Optimizer::State optimizer_state();
  // Replaces the optimizer's state (slots and iterations) on every replica, e.g. from a backup;
  // names and shapes must be those optimizer_state() gives (std::invalid_argument otherwise).
  void set_optimizer_state(const Optimizer::State& state);
  const std::vector<std::string>& metric_names() const { return metric_names_; }
  const std::vector<int>& metric_outputs() const { return metric_outputs_; }
  std::shared_ptr<Strategy> strategy() const { return strategy_; }
  // Creates the engine (and the replicas) on first use; `y_shape` (labels, batch axis included)
  // resolves metric names such as "accuracy" the way Keras does.
  TrainEngine& engine(const Shape& y_shape = {});

  // Runs `steps` training steps over x[order[s*B ...]], y[...], each a global batch of at most
  // batch_size rows (the last one may be smaller). Metrics are reset first.
  // sample_weight (here and below): Keras's, one float32 per sample of x, or null (TrainEngine).
  EpochResult train_epoch(const Tensor& x, const Tensor& y, const std::int64_t* order, std::int64_t order_size,
                          std::int64_t batch_size, std::int64_t steps, const BatchCallback& on_batch_end,
                          const Tensor* sample_weight = nullptr);
  // The same loop over explicit batches: batch s is rows order[offsets[s] .. offsets[s+1]) (an
  // input pipeline's plan). Metrics are reset first unless `reset_metrics` is false (an epoch
  // fed one batch at a time), and batch indices passed to the callback start at `first_batch`.
  EpochResult train_batches(const Tensor& x, const Tensor& y, const std::int64_t* order,
                            const std::vector<std::int64_t>& offsets, const BatchCallback& on_batch_end,
                            bool reset_metrics = true, std::int64_t first_batch = 0,
                            const Tensor* sample_weight = nullptr);
  // Metrics are reset first unless `reset_metrics` is false: an evaluation fed in several calls
  // (batches of different sizes along a variable-length axis) accumulates them over every call.
  Logs evaluate(const Tensor& x, const Tensor& y, std::int64_t batch_size, const BatchCallback& on_batch_end,
                const Tensor* sample_weight = nullptr, bool reset_metrics = true);
  Tensor predict(const Tensor& x, std::int64_t batch_size);
  Logs train_on_batch(const Tensor& x, const Tensor& y, const Tensor* sample_weight = nullptr);
  // After a train step: each replica's sum of per-example losses divided by the global batch
  // (TF's compute_average_loss per replica; they add up to the step's mean loss).
  std::vector<double> replica_losses() const;
  Logs test_on_batch(const Tensor& x, const Tensor& y, const Tensor* sample_weight = nullptr);

  std::vector<Tensor> get_weights();
  // Copies the given arrays into the weights (shapes must match, in get_weights order).
  void set_weights(const std::vector<Tensor>& weights);

  // Architecture, weights, compile configuration and optimizer state in one file, written
  // atomically (docs/file_format.md). `metadata` is stored as given.
  void save(const std::string& path, const Json& metadata = Json::object());
  // Rebuilds a saved model; compiled (with its optimizer state) when it was saved compiled.
  // The strategy to compile under is given by the caller (a default OneDeviceStrategy if null).
  static std::unique_ptr<Model> load(const std::string& path, std::shared_ptr<Strategy> strategy = nullptr,
                                     Json* metadata = nullptr);
  Json config() const;

  // Fails every collective of this model's training, pending and later, on every worker, naming
  // `reason`: a process that leaves a multi-worker loop on an error calls it so that its peers
  // fail at once instead of waiting for it until their timeout. Training again makes new groups.
  void abort_collectives(const std::string& reason);

 private:
  class BusyGuard;  // holds the model for one loop or change (see the class comment)

  void check_data(const Tensor& x, const Tensor* y, const char* where, const Tensor* sample_weight = nullptr) const;
  void ensure_built_for(const Tensor& x);
  // Drops the engine (a new one is made on next use) without losing weights it trained.
  void release_engine();
  // Another model built on some of this one's layers (a feature extractor, a model using this one
  // as a layer) packed their weights into buffers of its own: this model packs them back (dropping
  // its engine, whose buffers the layers no longer read) before it runs or reads them.
  void reclaim_weights();
  // Runs `change` on the layer stack (add, pop) with the optimizer's state carried across it.
  void reshape_network(const std::function<void()>& change);

  std::string name_;
  std::uint64_t seed_;
  std::unique_ptr<Network> network_;
  LayerStack* stack_ = nullptr;  // network_, when Sequential
  LayerGraph* graph_ = nullptr;  // network_, when functional
  std::vector<std::string> input_names_;
  std::shared_ptr<Loss> loss_;
  std::shared_ptr<Optimizer> optimizer_;
  std::vector<std::string> metric_names_;
  std::vector<int> metric_outputs_;  // per metric name, its output (a MultiOutputLoss's)
  std::vector<std::unique_ptr<Metric>> metrics_;
  bool metrics_resolved_ = false;  // metrics_ made from metric_names_ (needs the label shape)
  std::shared_ptr<Strategy> strategy_;
  std::unique_ptr<TrainEngine> engine_;
  std::function<void()> step_hook_;
  std::mutex busy_mutex_;
  std::thread::id busy_owner_;
  int busy_depth_ = 0;
};

}  // namespace mdtrain
