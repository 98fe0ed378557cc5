#pragma once
// Network: what a strategy sees of a model's layers. A strategy replicates, feeds and
// synchronizes a Network without knowing how its layers are connected: the Sequential body
// (LayerStack) is one; a layer graph (LayerGraph, the Functional API) is another, and strategies
// run it unchanged.
//
// The contract every implementation keeps, because strategies build on it:
// - Once built, all trainable parameter values live in one contiguous buffer and their gradients
//   in another (each Parameter's tensors are views into them), in one fixed packed order; the
//   optimizer's element order is that order. Non-trainable weights live in a third buffer.
// - backward() reports, through GradientsFinal, the first packed element from which every
//   gradient is final; that point only moves down and reaches 0 when backward ends.
// - A replica with no rows in a step joins every collective its layers run (step_without_rows).
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

#include "mdtrain/core/device.h"
#include "mdtrain/core/parameter.h"
#include "mdtrain/core/tensor.h"
#include "mdtrain/nn/layer.h"
#include "mdtrain/ops/activation.h"

namespace mdtrain {

class Network {
 public:
  virtual ~Network() = default;

  virtual bool built() const = 0;
  // Every layer, in packed order; the input and output shapes (batch axis excluded) and dtype.
  virtual const std::vector<std::shared_ptr<Layer>>& layers() const = 0;
  virtual const Shape& input_shape() const = 0;
  virtual Shape output_shape() const = 0;
  virtual DType dtype() const = 0;
  // Where the packed parameters live (the host unless replicate() placed them elsewhere).
  virtual const Device& device() const = 0;

  virtual Tensor forward(const Tensor& x, const ForwardContext& ctx) = 0;
  // Called during backward each time gradients were written, with the first element of
  // packed_grads() from which every gradient is final.
  using GradientsFinal = std::function<void(std::int64_t first_final_element)>;
  // Backpropagates dL/d(output) of the last forward into every trainable parameter's .grad.
  virtual void backward(const Tensor& dy, const GradientsFinal& on_final) = 0;
  // The output's final activation, the logits before it, and backward from d(loss)/d(logits)
  // (Keras computes crossentropy from the logits of a softmax/sigmoid output).
  virtual Activation output_activation() const = 0;
  virtual Tensor logits() const = 0;
  virtual void backward_from_logits(const Tensor& dlogits, const GradientsFinal& on_final) = 0;
  // A training step's forward and backward for a replica whose slice is empty: joins every
  // collective the layers run and calls on_final at the points backward() would.
  virtual void step_without_rows(const ForwardContext& ctx, const GradientsFinal& on_final) = 0;

  // Keras's masks (nn/sequence_mask.h) at the output: whether it carries one (known from the
  // layers alone, before any forward: every replica of a step agrees, rows or not), and the mask
  // of the last forward's output ((batch, timesteps); empty: none). A masked output's loss and
  // metrics leave the masked steps out (nn/masked_steps.h).
  virtual bool output_masked() const { return false; }
  virtual Tensor output_mask() const { return Tensor(); }
  // The two halves of step_without_rows, for an executor that runs a collective between them (the
  // count of a masked output's kept steps, which is only known after the forward). Networks whose
  // output may carry a mask implement them.
  virtual void forward_without_rows(const ForwardContext& /*ctx*/) {
    throw std::logic_error("[network] forward_without_rows is not implemented by this network");
  }
  virtual void backward_without_rows(const GradientsFinal& /*on_final*/) {
    throw std::logic_error("[network] backward_without_rows is not implemented by this network");
  }

  // Every weight in get_weights() order; the trainable ones in packed order.
  virtual ParameterList parameters() = 0;
  virtual ParameterList trainable_parameters() = 0;
  virtual ParameterList non_trainable_parameters() = 0;
  virtual std::int64_t trainable_count() const = 0;
  virtual Tensor& packed_values() = 0;
  virtual Tensor& packed_grads() = 0;
  virtual Tensor& non_trainable_values() = 0;
  // packed_values()/packed_grads() followed by kPackedPadding zero elements, so that equal
  // per-replica shards (reduce-scatter, all-gather) may run past the last parameter.
  static constexpr std::int64_t kPackedPadding = 2048;
  virtual Tensor& padded_values() = 0;
  virtual Tensor& padded_grads() = 0;
  // Packs the weights again after layers changed Layer::trainable (compile calls it): the
  // trainable ones move into the packed buffers, the frozen ones out. Values are kept.
  virtual void repack_parameters() = 0;

  // The weight penalties of the current weights, and their gradients added to .grad.
  virtual double regularization_loss() const = 0;
  virtual void add_regularization_gradients() = 0;
  // The activity penalties of the last forward (Layer::activity_loss), summed in layer order, and
  // whether any layer adds one (known before any forward).
  double activity_loss() const {
    double sum = 0;
    for (const auto& layer : layers()) sum += layer->activity_loss();
    return sum;
  }
  bool adds_activity_loss() const {
    for (const auto& layer : layers())
      if (layer->adds_activity_loss()) return true;
    return false;
  }

  // The connections, for strategies that split layers or cut the network: per layer (its position
  // in layers()), the positions of the layers that read its output, ascending (once per read), then kOutput for
  // the network's output.
  static constexpr int kOutput = -1;
  virtual std::vector<std::vector<int>> layer_readers() const = 0;
  // The same connections seen from the reading side: per layer, the values it reads in call order
  // (a merge layer's inputs in order), each the position of the layer whose output it is, or
  // kNetworkInput - k for the network's input k.
  static constexpr int kNetworkInput = -1;
  virtual std::vector<std::vector<int>> layer_inputs() const = 0;
  // Where the network can be cut into segments: the positions p (0 < p < layers().size(), ascending)
  // at which layers [0, p) and [p, n) meet in one tensor, layer p - 1's output, read only from p
  // on (no input of the network and no earlier value crosses). Every position of a stack is one; in
  // a layer graph, a residual block's inside is none.
  virtual std::vector<int> cut_points() const = 0;
  // The same connections over other layers (one per position of layers(), unbuilt or clones),
  // built for the same inputs and dtype (weights as the layers build them): a sharded copy.
  virtual std::unique_ptr<Network> with_layers(std::vector<std::shared_ptr<Layer>> layers) const = 0;

  // A deep copy (layers, weights) with its packed parameters on `device`: a replica's copy.
  // Throws like check_device_support before allocating anything.
  virtual std::unique_ptr<Network> replicate(const Device& device) const = 0;
  // Throws std::invalid_argument naming the first layer that cannot run on `device`.
  virtual void check_device_support(const Device& device) const = 0;
};

}  // namespace mdtrain
