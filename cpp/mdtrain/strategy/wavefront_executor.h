#pragma once
#include <memory>
#include <vector>

#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/network.h"
#include "mdtrain/nn/packed_parameters.h"
#include "mdtrain/optim/optimizer.h"
#include "mdtrain/strategy/step_executor.h"

namespace mdtrain {

class RecurrentLayer;
class WavefrontStrategy;

// The step of WavefrontStrategy: the wavefront pipeline of a deep recurrent stack, one logical CPU
// device (one thread) per stage. The model's leading recurrent layers with return_sequences=True
// (a Sequential model's, or a chain of them at the start of a layer graph)
// are cut into as many contiguous groups as the strategy has stages (as even as possible, earlier
// stages one more); the layers after them (the head: Dense, a return_sequences=False recurrent
// layer, ...) run on the last stage, on the whole output sequence. The sequence is cut into time
// chunks of time_chunk steps (the last one may be shorter): stage s runs chunk k as soon as stage
// s-1 sent it over the pipe communicator (send/recv), starting from the final states of its own
// chunk k-1 (RecurrentLayer::forward_from_state), so stage s works on chunk k while stage s-1 works
// on chunk k+1. Backward runs the chunks in reverse: dL/d(initial states) of chunk k+1 is the
// dL/d(final states) of chunk k within a stage, and dL/d(chunk input) goes to the stage below.
//
// Each layer keeps only its last call's activations, so a stage holds one clone of each of its
// layers per chunk (their weights are views of the model's, not copies); their gradients are
// summed in ascending chunk order into the model's layers. Then the model's one optimizer (the
// executor's, which the model reads: iterations, slots, checkpoints) applies them all, on the
// calling thread, as on one device: one step per global batch. The result equals the one-device
// step up to float32 rounding (the chunked sums of the weight gradients). The model's layers are
// the weights (no copies): get_weights and checkpoints see the trained state at once.
//
// Evaluation and prediction run the whole model forward on the calling thread, exactly as one
// device does (the wavefront pays in training, where backward doubles the work per chunk).
class WavefrontExecutor final : public StepExecutor {
 public:
  // primary: built, any Network. Throws std::invalid_argument ("[wavefront] ...") for a model that
  // has fewer leading recurrent return_sequences layers than stages, each reading only the layer
  // before it and read only by the next (naming the first layer that is not one).
  WavefrontExecutor(Network& primary, WavefrontStrategy& strategy, const Loss& loss, const Optimizer& optimizer);
  ~WavefrontExecutor() override;

  StepLoss train_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) override;
  StepLoss test_step(const GlobalBatch& batch, ReplicaOutputSink* outputs) override;
  void predict_step(const Tensor& x, std::int64_t begin, std::int64_t count, Tensor& out) override;

  // The roster has one replica: the model itself (the stages work on its layers), with the one
  // optimizer and a profile whose wall the step keeps.
  Optimizer::State optimizer_state() const override { return optimizer_->state(); }
  // The model's layers hold the weights: nothing to copy either way.
  void broadcast_weights_from_primary() override {}
  void refresh_primary() override {}
  void abort(const std::string& reason) override;

  // Per stage (device), the calls and bytes of its sends and receives since reset_profile.
  std::vector<CollectiveCounts> stage_collectives() const;

  int num_stages() const { return static_cast<int>(stages_.size()); }
  std::int64_t time_chunk() const { return time_chunk_; }
  // The first layer of each stage.
  std::vector<int> stage_starts() const;

 protected:
  void reset_own_profile() override;  // the stages' send and receive counts

 private:
  struct Stage;
  void prepare(std::int64_t steps);
  void run_stage(Stage& st, const Tensor& x, const Tensor& y, std::int64_t labels, std::uint64_t step,
                 ReplicaOutputSink* outputs);
  // The global batch's rows into x_batch_, y_batch_.
  void gather_batch(const GlobalBatch& batch);
  void remake_communicators();

  Network& primary_;
  // The layers after the recurrent prefix, run on the last stage: the model's own, a block of a
  // layer graph as one GraphSegment.
  LayerList head_;
  WavefrontStrategy& strategy_;
  std::int64_t time_chunk_;
  std::unique_ptr<Loss> loss_, logits_loss_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<std::int64_t> chunk_begin_;  // chunk k covers steps [chunk_begin_[k], chunk_begin_[k+1])
  std::int64_t steps_ = -1;
  Tensor x_batch_, y_batch_;
  double loss_sum_ = 0;
  bool communicators_broken_ = false;
  StepProfile profile_;
};

}  // namespace mdtrain
