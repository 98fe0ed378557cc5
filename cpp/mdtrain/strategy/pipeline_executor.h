#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/strategy/pipeline_schedule.h"
#include "mdtrain/strategy/step_executor.h"

namespace mdtrain {

class PipelineStrategy;

// The step of PipelineStrategy: one device per mesh position (pipeline b, stage s), one thread
// each. Stage s holds layers [start_s, start_{s+1}) of the primary (a LayerStack of clones, its
// weights copied from the primary). A training step cuts pipeline b's slice of the global batch
// (slice_of, as every executor cuts it) into num_microbatches micro-batches (slice_of again:
// uneven, possibly empty) and runs the schedule's op list of its stage: activations go forward and
// their gradients back over the pipe-axis communicator (send/recv). A layer keeps the state of its
// last forward only, so each stage has one state slot per micro-batch that can be in flight at once
// (GPipe: all m; 1F1B: at most p - s on stage s; the peak of forwards whose backward has not run in
// the stage's op list): a clone of the stage's layers whose weights and gradients are views of the
// stage's (re-taken every step), holding one micro-batch's activations from its forward to its
// backward (as PyTorch's pipelining and DeepSpeed keep them). With PipelineStrategy::recompute()
// the stage keeps only the inputs of its in-flight micro-batches and, before the backward of one
// that is not the last it ran forward, runs its forward again (GPipe's recomputation: less memory,
// one more forward per micro-batch). Either way each micro-batch's forward and backward compute
// bitwise the same values, so the two give bitwise the same weights.
//
// The primary is any Network. Stages start at its cut points only (Network::cut_points): at any
// layer of a Sequential model, between the residual blocks of a layer graph (std::invalid_argument
// naming the layer otherwise); a block inside a stage is one GraphSegment (nn/graph_segment.h)
// among the stage's layers, and the stage's weights are its layers' of the primary, in order.
//
// The loss of each micro-batch is scaled by batch_loss_scale for the whole global batch, and each
// stage sums its micro-batches' gradients in ascending micro-batch order (both schedules run
// backwards in that order), so the step equals the unpipelined one up to float32 rounding of the
// sums, and GPipe and 1F1B are bitwise equal. Then the stage's gradients are summed over the batch
// axis (several pipelines), and each stage's optimizer updates its weights: one step per global
// batch. Evaluation and prediction run forward only through the stages (micro-batches flowing as in
// training, every worker over its own pipelines), the evaluation loss computed on the calling thread
// from the whole batch's outputs, as one device computes it.
//
// Across MPI workers either each worker runs whole pipelines (the batch axis across workers), or
// every pipeline spans the workers (PipelineStrategy::pipe_across_workers): each worker computes
// only its stages, activations and gradients go over MPI send/recv. Between steps each worker
// keeps only its own stages current: the other workers' stages (weights and optimizer slots) reach
// its primary and optimizer_state() when gather_stages() runs, a collective call that the training
// loop makes at points every worker reaches (epoch ends, in-epoch checkpoints; docs/pipeline.md).
// Evaluation and prediction run through the pipelines across the workers; the last stage sends its
// rows of the output to every other worker, so each returns the whole result.
//
// BatchNormalization normalizes each micro-batch with its own statistics and moves its moving
// statistics once per global batch from all micro-batches (deferred, ForwardContext::
// defer_statistics; a recomputed forward records nothing; a slot's records move to the stage's
// layers after each forward, in forward order), so they do not depend on the micro-batch count.
//
// On GPUs (every device of the mesh a GPU, NCCL communicators) each stage's LayerStack is copied to
// its GPU; the first stage gathers its micro-batches' rows on the host into its GPU (the last stage
// its labels), received activations and gradients land in that GPU's memory (NCCL send / recv, a
// send followed by a recv run as one group), the micro-batches' gradients are summed there
// (ops::add_into), and the loss, the batch axis's gradient sum and the update run there too. The
// primary (the whole model) stays on the host: refresh_primary copies the stages' weights back
// from their GPUs. Not supported yet (std::invalid_argument("[pipeline] ...") at the first step):
// clipnorm / global_clipnorm, synchronized BatchNormalization, layer graphs with several inputs or
// outputs.
class PipelineExecutor final : public StepExecutor {
 public:
  PipelineExecutor(Network& primary, PipelineStrategy& strategy, const Loss& loss, const Optimizer& optimizer);
  ~PipelineExecutor() override;

  StepLoss train_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) override;
  StepLoss test_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) override;
  void predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) override;

  // The roster has one "replica" per device, in mesh order; their networks are the stages, their
  // profiles count the sends and receives along the pipe axis and the batch axis's collectives.
  Optimizer::State optimizer_state() const override;
  void broadcast_weights_from_primary() override;
  void refresh_primary() override;
  void abort(const std::string& reason) override;

  // Pipe axis across workers: each stage of pipeline 0 sends its weights (BatchNormalization's
  // moving statistics included) and optimizer slots to every other worker, which writes them into
  // its primary and the optimizer state it reports. Collective: every worker must call it at the
  // same point (PipelineStrategy::gather_stages checks that they do). No-op in one process.
  void gather_stages();
  // False while the other workers' stages in the primary and optimizer_state() are older than
  // theirs (a step ran since the last gather_stages); always true in one process.
  bool stages_whole() const { return !across_workers_ || steps_since_gather_ == 0; }
  // How many times gather_stages moved the stages since this executor was made.
  std::int64_t gathers() const { return gathers_; }

  // The first layer of each stage (stage 0 starts at 0).
  const std::vector<int>& stage_starts() const { return starts_; }
  // Per device, summed over training steps since reset_profile: seconds in forward and backward
  // (busy) and the rest of the pipeline's span (idle: the bubble, including waits for transfers).
  // The span runs from the step's start to the end of the last device's schedule; the gradient sum
  // over the batch axis and the optimizer update that follow are not bubble (profile()).
  std::vector<double> busy_seconds() const;
  std::vector<double> idle_seconds() const;
  // Per device: busy_seconds' forward part (the last stage's includes the loss; a forward run
  // again before its backward, with recomputation, counts as backward). The bubble formula assumes
  // equal forwards and equal backwards across stages, not only equal sums: with 2 stages whose
  // forwards differ, the later one waits the difference for every micro-batch.
  std::vector<double> forward_seconds() const;
  // Per device: the most bytes of micro-batch inputs it held stashed at once in the last
  // training step (1F1B holds at most stages - s micro-batches, GPipe all of them).
  std::vector<std::int64_t> peak_stash_bytes() const;
  // Per device: the most bytes it held for backward at once in the last training step, its
  // stashed micro-batch inputs plus the per-call state of its layers (Layer::held_activation_bytes:
  // activations saved for backward, outputs, backward scratch; not weights or gradients) in every
  // state slot (a slot keeps its buffers between micro-batches), or in the stage's one set of
  // layers with recomputation.
  std::vector<std::int64_t> peak_activation_bytes() const;
  // How many state slots each device has (0 with recompute: the stage's layers run every forward).
  std::vector<int> state_slots() const;

 protected:
  void reset_own_profile() override;  // busy, forward and idle seconds

 private:
  struct Device;
  template <class F>
  void run_devices(F&& fn);
  void remake_communicators();
  double regularization_loss() const;
  // Inference through this worker's pipelines: count rows, cut among them and into micro-batches
  // that flow forward stage to stage; input(first, rows) gives stage 0 a micro-batch's rows; the last
  // stages write rows [first, first + rows) of out (and of logits, when given: the last layer's
  // pre-activation).
  void forward_pipelined(std::int64_t count, const std::function<Tensor(std::int64_t, std::int64_t)>& input,
                         Tensor& out, Tensor* logits);
  // The weights of the model's layers that `stage` holds, in the stage's order; the model's values
  // into a device's stage, and back.
  ParameterList primary_parameters_of_stage(int stage) const;
  void copy_weights_to_stage(Device& dev) const;
  void copy_weights_from_stage(Device& dev) const;
  // Pipe axis across workers (stage s on worker s): the worker holding `stage`, and the pipe-axis
  // rank (the stage) that receives for worker `w` what the other workers' stages send it.
  static int worker_of_stage(int stage) { return stage; }
  static int receiver_of_worker(int w) { return w; }
  // gather_stages on one of pipeline 0's devices: its stage sends to every other worker, and the
  // receiving stage writes what the other workers' stages send into the primary and gathered_slots_.
  void gather_stage(Device& dev);
  // Per layer of the primary: its regularization loss when one of this worker's stages holds it
  // (read from the stage), else 0; summed over the workers, every layer's current value.
  std::vector<double> own_layer_regularization() const;
  // The regularization loss from every layer's value, folded as regularization_loss() folds it
  // (`stages_newer`: the stages hold newer weights than the primary).
  double regularization_from(const double* per_layer, bool stages_newer) const;

  Network& primary_;
  PipelineStrategy& strategy_;
  std::unique_ptr<Loss> loss_;
  std::unique_ptr<Optimizer> whole_optimizer_;  // for the order of optimizer_state()
  PipelineSchedule schedule_;                   // each stage's ops, from the strategy's StepPlan (pipeline_schedule_of)
  std::vector<int> starts_;
  std::vector<std::unique_ptr<Device>> devices_;  // mesh order
  int pipelines_ = 1;                             // along the batch axis, over every worker
  int first_pipeline_ = 0;                        // this worker's first: its stages are copied into the primary
  // Pipe axis across workers (PipelineStrategy::pipe_across_workers): the other workers' stages are
  // gathered into the primary and gathered_slots_ by gather_stages only, not after every step (that
  // moved (workers - 1) x (weights + slots) bytes per step).
  bool across_workers_ = false;
  std::int64_t steps_since_gather_ = 0;
  std::int64_t gathers_ = 0;
  std::vector<std::vector<std::string>> stage_slots_;  // per stage: its slot names, whole-state order
  Optimizer::State slot_template_;                     // the whole optimizer's state: slot shapes
  std::map<std::string, Tensor> gathered_slots_;       // the other workers' stages' slots
  bool communicators_broken_ = false;
  double wall_ = 0;
};

}  // namespace mdtrain
