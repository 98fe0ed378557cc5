#pragma once
#include <memory>
#include <vector>

#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/optimizer.h"

namespace mdtrain {

class RecurrentLayer;

// The wavefront pipeline of a deep recurrent stack: one logical CPU device (one thread) per
// stage. The stack's leading recurrent layers with return_sequences=True are cut into `devices`
// contiguous groups (as even as possible, earlier stages one more); the layers after them (the
// head: Dense, a return_sequences=False recurrent layer, ...) run on the last stage, on the whole
// output sequence. The sequence is cut into time chunks of `time_chunk` steps (the last one may be
// shorter): stage s runs chunk k as soon as stage s-1 sent it over the threads Communicator
// (send/recv), starting from the final states of its own chunk k-1 (RecurrentLayer::
// forward_from_state), so stage s works on chunk k while stage s-1 works on chunk k+1. Backward
// runs the chunks in reverse: dL/d(initial states) of chunk k+1 is the dL/d(final states) of chunk
// k within a stage, and dL/d(chunk input) goes to the stage below.
//
// Each layer keeps only its last call's activations, so a stage holds one clone of each of its
// layers per chunk (their weights are views of the primary's, not copies); their gradients are
// summed in ascending chunk order into the primary's, then one optimizer step per stage updates the
// primary's layers (each stage only its own). The result equals the one-device
// step up to float32 rounding (the chunked sums of the weight gradients), for per-element
// optimizers (SGD, Adam, ... without clipnorm / global_clipnorm).
class WavefrontExecutor {
 public:
  // primary: built; stays the model whose weights are updated. Throws std::invalid_argument
  // ("[wavefront] ...") for devices < 1, time_chunk < 1, or a stack that has fewer leading
  // recurrent return_sequences layers than devices (naming the first layer that is not one).
  WavefrontExecutor(LayerStack& primary, int devices, std::int64_t time_chunk, const Loss& loss,
                    const Optimizer& optimizer);
  ~WavefrontExecutor();

  // One optimizer step on (x (batch, timesteps, features), y); returns the mean loss (plus the
  // regularization losses), as Keras's train_on_batch.
  double train_step(const Tensor& x, const Tensor& y);

  int devices() const { return static_cast<int>(stages_.size()); }
  std::int64_t time_chunk() const { return time_chunk_; }
  // The first layer of each stage.
  std::vector<int> stage_starts() const;
  std::int64_t iterations() const { return step_; }

 private:
  struct Stage;
  void prepare(std::int64_t batch, std::int64_t steps);
  void run_stage(Stage& st, const Tensor& x, const Tensor& y, double& loss_out);

  LayerStack& primary_;
  std::int64_t time_chunk_;
  std::unique_ptr<Loss> loss_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<std::int64_t> chunk_begin_;  // chunk k covers steps [chunk_begin_[k], chunk_begin_[k+1])
  std::int64_t batch_ = -1, steps_ = -1;
  std::uint64_t step_ = 0;
};

}  // namespace mdtrain
