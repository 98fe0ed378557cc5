#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/core/parameter.h"
#include "mdtrain/core/tensor.h"
#include "mdtrain/nn/cross_replica.h"
#include "mdtrain/ops/activation.h"

namespace mdtrain {

// What a forward pass needs to know besides its input. A layer never learns which strategy runs
// it: a replica passes where its slice starts in the global batch, and layers that draw random
// numbers (Dropout) key them on global positions, so the split does not change the result.
struct ForwardContext {
  bool training = false;
  std::uint64_t step = 0;              // the optimizer step (training) — keys dropout masks
  std::int64_t global_row_offset = 0;  // first row of this slice within the global batch
  // The other replicas of this training step, for layers whose training statistics span the
  // global batch (BatchNormalization). Null: this replica is alone. Set only for training steps;
  // evaluation and prediction never run a collective.
  CrossReplicaContext* replicas = nullptr;
  // Pipeline micro-batches (strategy/pipeline_executor.h): layers with running statistics
  // (BatchNormalization) normalize with this micro-batch's statistics but only record them; the
  // strategy calls apply_deferred_statistics() once per global batch, so the running statistics
  // do not depend on the micro-batch count. `recompute`: this forward repeats one already
  // recorded (a stage recomputing its activations): nothing is recorded again.
  bool defer_statistics = false;
  bool recompute = false;
  // Rows of the whole global batch, in the training steps of executors that collect activity
  // losses (Layer::activity_loss): Keras divides those by the batch size, so their gradient is
  // divided by this. 0 elsewhere.
  std::int64_t global_rows = 0;
};

// A Keras layer: built once for an input shape (batch axis excluded), then run forward on batches
// and backward on the gradient of its last forward output. Each replica owns its own clone, so
// layers may keep per-call buffers.
class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;

  virtual std::string class_name() const = 0;  // "Dense", as Keras names it
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  bool built() const { return built_; }
  DType dtype() const { return dtype_; }

  // Keras's layer.trainable. A frozen layer's weights are all non-trainable: the optimizer never
  // updates them, they add no regularization penalty (Keras counts trainable weights' only) and a
  // BatchNormalization normalizes with its moving statistics, in training too, as Keras 3's does.
  // As in Keras, a change takes effect when the network packs its weights again (build, compile).
  bool trainable() const { return trainable_; }
  void set_trainable(bool trainable) { trainable_ = trainable; }
  // Sets each weight's Parameter::trainable from its own kind (a moving statistic never is) and
  // trainable(); PackedParameters::pack calls it before packing.
  void apply_trainable();
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return output_shape_; }

  // Creates the weights for inputs shaped (batch, *input_shape). `seed` makes initialisation
  // reproducible. Throws std::invalid_argument naming the layer when the shape does not fit.
  void build(const Shape& input_shape, std::uint64_t seed, DType dtype = DType::Float32);
  // kUnknownDim in input_shape propagates to the output's dimensions that depend on it.
  virtual Shape compute_output_shape(const Shape& input_shape) const = 0;
  // Whether the layer may be built for an input shape with unknown dimensions (core/shape.h),
  // running each batch at its own size without being built again. Such a layer checks, in
  // compute_output_shape, that the dimensions its weights depend on are known (Dense: the last).
  // The rest need every dimension known, and build() refuses them by name.
  virtual bool supports_unknown_dims() const { return false; }

  // x is (batch, *input_shape()). The result stays valid until the next forward.
  virtual Tensor forward(const Tensor& x, const ForwardContext& ctx) = 0;
  // Given dL/dy of the last forward: overwrites the parameters' .grad and returns dL/dx, or an
  // undefined Tensor when !need_input_grad (the first layer skips that GEMM).
  virtual Tensor backward(const Tensor& dy, bool need_input_grad) = 0;

  // Gradient accumulation: a layer that supports it, once set_accumulate_gradients(true), adds
  // its parameters' gradients to their .grad in backward (and backward_from_logits) instead of
  // overwriting them, so a strategy summing micro-batches needs no separate pass over the
  // gradients. Each micro-batch's gradient is computed as without accumulation and then added
  // (for Dense: the weight-gradient GEMM with beta = 1), so the sum is bitwise that of adding the
  // overwritten gradients one by one while a call's rows fit in one of the BLAS's inner blocks
  // (320 rows with OpenBLAS here), and equal to float32 rounding beyond
  // (tests/cpp/nn/gradient_accumulation_test.cpp). Layers that keep the default do not support it
  // and ignore the flag.
  virtual bool supports_gradient_accumulation() const { return false; }
  void set_accumulate_gradients(bool accumulate) { accumulate_gradients_ = accumulate; }
  bool accumulate_gradients() const { return accumulate_gradients_; }

  // A replica whose slice of a training batch is empty runs no forward or backward; it calls these
  // instead, in the same order (forward layer by layer, then backward in reverse with the same
  // need_input_grad), so that a layer that runs collectives through ctx.replicas in training
  // still joins every one of them (with empty contributions) and no peer waits for it. Layers
  // with nothing to join keep the defaults, which do nothing.
  virtual void forward_without_rows(const ForwardContext& /*ctx*/) {}
  virtual void backward_without_rows(bool /*need_input_grad*/) {}
  // Updates the running statistics once from every statistic recorded by forwards with
  // ctx.defer_statistics since the last call (summed over `replicas` when given: every replica
  // calls it), and forgets them. Layers without running statistics keep the default.
  virtual void apply_deferred_statistics(CrossReplicaContext* /*replicas*/) {}
  // Appends the statistics recorded by this layer's deferred forwards to those of `to` (a clone
  // of this layer) and forgets them here: a strategy that runs micro-batches on clones of a layer
  // (a pipeline stage keeping each in-flight micro-batch's activations) gathers them, in forward
  // order, on the layer whose apply_deferred_statistics it calls. Default: nothing recorded.
  virtual void move_deferred_statistics_to(Layer& /*to*/) {}

  // The activation this layer applies last (Linear when none). When it is softmax or sigmoid, the
  // engine may compute a crossentropy from logits() and come back through backward_from_logits(),
  // as Keras does (see Loss::on_logits_of).
  virtual Activation output_activation() const { return Activation::Linear; }
  // The pre-activation of the last forward (valid when output_activation() is not Linear).
  virtual Tensor logits() const;
  // backward() given dL/d(logits) instead of dL/d(output).
  virtual Tensor backward_from_logits(const Tensor& dlogits, bool need_input_grad);

  // Every weight, in Keras's get_weights() order; non-trainable ones (BatchNormalization's moving
  // statistics) have Parameter::trainable == false and get no gradient.
  virtual std::vector<Parameter*> parameters() { return {}; }
  virtual double regularization_loss() const { return 0.0; }
  // Keras's activity regularization (ActivityRegularization): whether this layer adds a loss term
  // computed from its activations, and that term for the last forward's rows, before Keras's
  // division by the batch size (the executor sums it over the slices into the loss sum it divides
  // by the global batch's rows). Only executors that collect it may train such a layer
  // (StepExecutor::reads_activity_losses).
  virtual bool adds_activity_loss() const { return false; }
  virtual double activity_loss() const { return 0.0; }
  // Adds d(regularization_loss)/dw to each parameter's .grad.
  virtual void add_regularization_gradients() {}

  // A deep copy: same configuration, same weights, independent buffers.
  virtual std::unique_ptr<Layer> clone() const = 0;
  // Bytes of the per-call state this layer holds now: what its last forward kept for backward
  // (activations, masks, statistics), its output and its backward scratch; not its weights or
  // gradients, and not views of its input (the previous layer's output, or the caller's). A
  // pipeline stage that keeps several micro-batches' activations holds this once per micro-batch
  // in flight. Layers that keep no per-call state (Flatten, Reshape) keep the default.
  virtual std::int64_t held_activation_bytes() const { return 0; }
  // True when forward and backward run on CUDA devices (the layer's buffers follow its input's
  // device and it calls only ops with CUDA kernels). Layers that keep the default cannot be
  // placed on a GPU: LayerStack::check_device_support names them.
  virtual bool has_cuda_kernels() const { return false; }
  // Keras's get_config(): {"name": ..., "trainable": true, ...layer fields}.
  virtual Json config() const;

  // Tensor parallelism (strategy/tensor_parallel_plan.h): the sharded form this layer has, if any.
  // The plan picks among a form's variants from the weight layouts; a layer whose weights are
  // split but whose form is None is refused, one with no split weight runs replicated.
  enum class TensorParallelForm {
    None,
    Dense,      // column-parallel (kernel split by output features) or row-parallel (by input)
    Conv2D,     // column-parallel by output channels
    Embedding,  // by rows (vocabulary) or by columns
    Recurrent,  // by units (a RecurrentLayer)
    // Element-wise: a split activation passes through between a column- and a row-parallel
    // layer. Dropout (a SplitDropout on the split activation) or an activation that is not softmax.
    ElementwiseDropout,
    Elementwise,
  };
  virtual TensorParallelForm tensor_parallel_form() const { return TensorParallelForm::None; }
  // For a column-parallel form (Dense, Conv2D, Embedding): a new, unbuilt layer of the same kind,
  // name and configuration with 1/shards of the output features (units, filters, output_dim), and
  // without its activation when `drop_activation`. Other layers throw std::logic_error.
  virtual std::unique_ptr<Layer> with_output_share(int shards, bool drop_activation) const;

 protected:
  virtual void build_weights(const Shape& /*input_shape*/, std::uint64_t /*seed*/) {}
  // For clone(): marks this layer built exactly as `other` is (weights are copied by the caller).
  void copy_build_state(const Layer& other) {
    built_ = other.built_;
    dtype_ = other.dtype_;
    input_shape_ = other.input_shape_;
    output_shape_ = other.output_shape_;
    trainable_ = other.trainable_;
    own_trainable_ = other.own_trainable_;
  }
  // Keras's message for an input that does not fit a built layer.
  void check_input(const Tensor& x) const;
  // For layers that support unknown dimensions: throws std::invalid_argument naming the layer
  // unless axis `axis` of input_shape (negative: from the end) is known; `what` says what needs it.
  void require_known_dim(const Shape& input_shape, int axis, const char* what) const;
  // The bytes of the defined tensors among `tensors`, a storage shared by several counted once.
  static std::int64_t bytes_of(std::initializer_list<const Tensor*> tensors);

  std::string name_;
  bool built_ = false;
  DType dtype_ = DType::Float32;
  Shape input_shape_, output_shape_;
  bool accumulate_gradients_ = false;  // read by layers whose supports_gradient_accumulation()
  bool trainable_ = true;
  // Each weight's Parameter::trainable as the layer made it, recorded by the first
  // apply_trainable (which is what changes the flags afterwards).
  std::vector<bool> own_trainable_;
};

// x's shape without its batch axis: what a layer's input_shape() declares.
Shape sample_shape(const Tensor& x);

// Reallocates `t` only when its shape or dtype must change (per-step buffers are reused).
void ensure_buffer(Tensor& t, const Shape& shape, DType dtype, const Device& device = {});

}  // namespace mdtrain
