#include "mdtrain/nn/tensor_parallel/vocab_parallel_embedding.h"

#include "mdtrain/nn/initializer.h"
#include "mdtrain/ops/embedding.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

VocabParallelEmbedding::VocabParallelEmbedding(std::string name, Embedding::Options options, ShardGroup* group)
    : Layer(std::move(name)),
      options_(std::move(options)),
      group_(group),
      regularizer_(make_regularizer(options_.embeddings_regularizer)) {
  MDTRAIN_CHECK(group_ != nullptr, std::invalid_argument, "[tensor_parallel] layer \"", name_,
                "\" needs a shard group");
  MDTRAIN_CHECK(options_.input_dim % group_->size() == 0, std::invalid_argument, "[model_parallel] layer \"", name_,
                "\": a vocabulary of ", options_.input_dim, " rows cannot be split into ", group_->size(), " shards");
}

Shape VocabParallelEmbedding::compute_output_shape(const Shape& input_shape) const {
  Shape out = input_shape;
  out.push_back(options_.output_dim);
  return out;
}

void VocabParallelEmbedding::build_weights(const Shape&, std::uint64_t) {
  // The values come from the unsharded table (the strategy scatters them); zeros until then.
  table_ = Parameter(name_ + "/embeddings",
                     Tensor::zeros({options_.input_dim / group_->size(), options_.output_dim}, dtype_));
}

Tensor VocabParallelEmbedding::forward(const Tensor& x, const ForwardContext&) {
  MDTRAIN_CHECK(built_, std::logic_error, "[embedding] layer \"", name_, "\" was called before it was built");
  ensure_buffer(rows_, {x.numel()}, DType::Int64, x.device());
  const ops::BadEmbeddingIndex bad = ops::embedding_rows(x, options_.input_dim, rows_);
  MDTRAIN_CHECK(bad.position < 0, std::invalid_argument, "[embedding] layer \"", name_, "\": index ", bad.value,
                " at flat position ", bad.position, " of the input (shape ", to_string(x.shape()),
                ") is not a whole number in [0, ", options_.input_dim, ") (input_dim=", options_.input_dim, ")");
  const std::int64_t n = x.numel(), dim = options_.output_dim, held = table_.value.dim(0),
                     first = group_->rank() * held;
  ensure_buffer(local_rows_, {n}, DType::Int64, x.device());
  ensure_buffer(keep_, {n, dim}, dtype_, x.device());
  ops::embedding_shard_rows(rows_, first, held, local_rows_, keep_);
  ensure_buffer(y_, {n, dim}, dtype_, x.device());
  ops::embedding_lookup(table_.value, local_rows_, y_);
  ops::multiply(y_, keep_, y_);  // rows of other shards' indices: zeros (x * 0; the table is finite)
  group_->sum(y_);               // one non-zero term per element: exactly the unsharded lookup
  Shape out = x.shape();
  out.push_back(dim);
  return y_.reshape(out);
}

Tensor VocabParallelEmbedding::backward(const Tensor& dy, bool need_input_grad) {
  MDTRAIN_CHECK(!need_input_grad, std::invalid_argument, "[embedding] layer \"", name_,
                "\" has no gradient with respect to its input (indices are not differentiable): an Embedding "
                "must be the first layer of the model");
  const std::int64_t dim = options_.output_dim;
  Tensor dy2 = dy.reshape({-1, dim});
  ensure_buffer(dy_held_, dy2.shape(), dtype_, dy2.device());
  // Indices of other shards add zeros into row 0 (x + 0 is x), so the held rows' sums are taken
  // in index order exactly as the unsharded layer takes them.
  ops::multiply(dy2, keep_, dy_held_);
  ops::embedding_scatter_add(dy_held_, local_rows_, table_.grad);
  return Tensor();
}

std::vector<Parameter*> VocabParallelEmbedding::parameters() {
  if (!built_) return {};
  return {&table_};
}

double VocabParallelEmbedding::regularization_loss() const {
  return regularizer_ && built_ ? regularizer_->loss(table_.value) : 0.0;
}

void VocabParallelEmbedding::add_regularization_gradients() {
  if (regularizer_ && built_) regularizer_->add_gradient(table_.value, table_.grad);
}

std::unique_ptr<Layer> VocabParallelEmbedding::clone() const {
  auto copy = std::make_unique<VocabParallelEmbedding>(name_, options_, group_);
  copy->copy_build_state(*this);
  if (built_) copy->table_ = Parameter(table_.name, table_.value.clone());
  return copy;
}

Json VocabParallelEmbedding::config() const {
  Json c = Layer::config();
  c.set("input_dim", options_.input_dim);
  c.set("output_dim", options_.output_dim);
  return c;
}

}  // namespace mdtrain
