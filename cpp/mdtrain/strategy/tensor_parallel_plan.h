#pragma once
// How a model's layers are split over the model axis of a mesh, from a layout per weight (Keras 3's
// LayoutMap: "layer/weight" -> one mesh axis name or none per dimension; absent weights are
// replicated), and the sharded copy of the model each shard trains.
//
// Supported layouts (n = the model axis size, which must divide the split dimension):
// - Dense kernel (None, model): column-parallel (output features split); its bias follows
//   (("model",) or absent). Dense kernel (model, None): row-parallel (input features split, partial
//   sums all-reduced, the bias, replicated, added once).
// - Conv2D kernel (None, None, None, model): split by output channels; its bias follows.
// - Embedding embeddings (model, None): split by rows (vocabulary); (None, model): by columns.
// - SimpleRNN / LSTM / GRU kernel (None, model): split by units (nn/tensor_parallel/
//   unit_parallel_recurrent.h). Keras's G*u columns are gate-major, so "the last dimension split"
//   means each shard takes its units' columns of every gate, not a contiguous block of columns;
//   recurrent_kernel (None, model) and the bias ((model,), GRU's (None, model)) follow the kernel.
// A column-parallel layer (Dense, Conv2D, Embedding by columns) whose output reaches a row-parallel
// Dense through element-wise layers only (Dropout, Activation other than softmax) keeps it split
// (Megatron's f/g pairing: no gather; Dropout draws the unsharded masks); otherwise it gathers it.
// Anything else is std::invalid_argument("[model_parallel] ...") naming the layer, the weight and
// the layout. Each layer names its sharded form (Layer::tensor_parallel_form); the pairing follows
// the network's connections (Network::layer_readers), so a layer graph splits as a stack does: a
// column-parallel output read by one element-wise layer, and so on, up to one row-parallel Dense.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mdtrain/nn/network.h"
#include "mdtrain/nn/tensor_parallel/shard_group.h"
#include "mdtrain/strategy/device_mesh.h"

namespace mdtrain {

// One mesh axis name per dimension of a weight; nullopt: that dimension is not split.
using WeightLayout = std::vector<std::optional<std::string>>;
using WeightLayouts = std::map<std::string, WeightLayout>;

// "(None, 'model')", for messages.
std::string layout_string(const WeightLayout& layout);

class TensorParallelPlan {
 public:
  enum class Kind {
    Replicated,
    ColumnDense,
    RowDense,
    ColumnConv2D,
    RowEmbedding,
    ColumnEmbedding,
    SplitDropout,
    UnitParallelRecurrent
  };

  // Validates `layouts` against the primary's layers and the mesh (model axis `model_axis`, of
  // size model_axis_size) and decides each layer's form.
  TensorParallelPlan(Network& primary, const WeightLayouts& layouts, const DeviceMesh& mesh,
                     const std::string& model_axis);

  int num_shards() const { return shards_; }
  Kind kind(std::size_t layer) const { return layers_[layer].kind; }
  // Whether layer i's weights are split (its regularization penalty is then a share per shard).
  bool sharded(std::size_t layer) const;
  // The dimension along which a weight is split, or -1 when it is replicated.
  int split_dim(const std::string& weight) const;
  // A column-parallel layer i: whether it gathers its output (else it stays split for a
  // row-parallel Dense); a row-parallel Dense i: whether its input arrives split.
  bool gathers_output(std::size_t layer) const { return layers_[layer].gather_output; }
  bool input_split(std::size_t layer) const { return layers_[layer].input_split; }

  // Shard k's model: the primary's layers in their sharded forms, talking through `group` (which
  // must outlive it), with shard k's pieces of the primary's weights.
  std::unique_ptr<Network> build_shard(Network& primary, ShardGroup* group) const;
  // Copies the primary's weights into shard k's network (its pieces), or shard k's pieces back.
  void scatter(Network& primary, Network& shard, int k) const;
  void gather(Network& shard, int k, Network& primary) const;
  // Shard k's piece of a whole tensor shaped like `weight` (the weight or one of its optimizer
  // slots), and back: a block along split_dim(weight), or for a recurrent layer's gate-major
  // weights its units of every gate. `part` is shaped like the piece.
  void copy_piece_out(const std::string& weight, const Tensor& whole, int k, Tensor& part) const;
  void copy_piece_in(const std::string& weight, const Tensor& part, int k, Tensor& whole) const;

 private:
  struct LayerPlan {
    Kind kind = Kind::Replicated;
    bool gather_output = true;        // column-parallel: gather the output
    bool input_split = false;         // row-parallel: the input arrives split
    std::int64_t whole_features = 0;  // split activations: the unsharded last dimension
  };
  std::vector<LayerPlan> layers_;
  std::map<std::string, int> split_dims_;
  std::map<std::string, std::int64_t> gate_counts_;  // gate-major split weights: their gate count G
  int shards_ = 1;
};

}  // namespace mdtrain
