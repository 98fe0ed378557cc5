#include "mdtrain/nn/embedding.h"

#include <cctype>
#include <string>
#include <vector>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/nn/initializer.h"
#include "mdtrain/ops/embedding.h"

namespace mdtrain {

namespace {

// Keras's initializer aliases "uniform" and "normal" (its default here is "uniform") as the names
// make_initializer knows.
Json keras_initializer(const Json& spec) {
  if (!spec.is_string()) return spec;
  std::string n;
  for (char c : spec.as_string())
    if (c != '_') n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "uniform") return Json("random_uniform");
  if (n == "normal") return Json("random_normal");
  return spec;
}

// "(1, 2)": the position of flat element `flat` of a tensor shaped (rows, *inner), its row counted
// from first_row.
std::string position_of(std::int64_t flat, const Shape& shape, std::int64_t first_row) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    index[k] = flat % shape[k];
    flat /= shape[k];
  }
  std::string out = "(";
  for (std::size_t k = 0; k < index.size(); ++k)
    out += (k ? ", " : "") + std::to_string(k == 0 ? index[k] + first_row : index[k]);
  return out + (index.size() == 1 ? ",)" : ")");
}

}  // namespace

Embedding::Embedding(std::string name, Options options) : Layer(std::move(name)), options_(std::move(options)) {
  MDTRAIN_CHECK(options_.input_dim >= 1, std::invalid_argument, "[embedding] layer \"", name_,
                "\": input_dim must be a positive integer (the vocabulary size), got ", options_.input_dim);
  MDTRAIN_CHECK(options_.output_dim >= 1, std::invalid_argument, "[embedding] layer \"", name_,
                "\": output_dim must be a positive integer, got ", options_.output_dim);
  options_.embeddings_initializer = keras_initializer(options_.embeddings_initializer);
  make_initializer(options_.embeddings_initializer);  // validate the name now, not at build time
  regularizer_ = make_regularizer(options_.embeddings_regularizer);
}

Shape Embedding::compute_output_shape(const Shape& input_shape) const {
  Shape out = input_shape;
  out.push_back(options_.output_dim);
  return out;
}

void Embedding::build_weights(const Shape&, std::uint64_t seed) {
  Rng rng(seed, 0);
  embeddings_ = Parameter(name_ + "/embeddings", Tensor({options_.input_dim, options_.output_dim}, dtype_));
  make_initializer(options_.embeddings_initializer)
      ->fill(embeddings_.value, options_.input_dim, options_.output_dim, rng);
}

void Embedding::check_index_shape(const Tensor& x) const {
  MDTRAIN_CHECK(built_, std::logic_error, "[embedding] layer \"", name_, "\" was called before it was built");
  if (!fits_declared(input_shape_, sample_shape(x))) {
    Shape expected{-1};
    expected.insert(expected.end(), input_shape_.begin(), input_shape_.end());
    fail<std::invalid_argument>("[embedding] Input 0 of layer \"", name_,
                                "\" is incompatible with the layer: expected shape ", to_string(expected),
                                ", but received input with shape ", to_string(x.shape()));
  }
  const DType t = x.dtype();
  MDTRAIN_CHECK(t == DType::Int32 || t == DType::Int64 || t == DType::Float32 || t == DType::Float64,
                std::invalid_argument, "[embedding] layer \"", name_,
                "\": indices must be int32, int64, float32 or float64 (whole numbers), got ", name_of(t));
}

void Embedding::index_rows(const Tensor& x, std::int64_t first_row) {
  ensure_buffer(rows_, {x.numel()}, DType::Int64, x.device());
  const ops::BadEmbeddingIndex bad = ops::embedding_rows(x, options_.input_dim, rows_);
  if (bad.position < 0) return;
  const std::string where = position_of(bad.position, x.shape(), first_row);
  if (!bad.integral)
    fail<std::invalid_argument>("[embedding] layer \"", name_, "\": index ", bad.value, " at position ", where,
                                " of the input (shape ", to_string(x.shape()),
                                ") is not a whole number; indices must be integers in [0, ", options_.input_dim,
                                ") (input_dim=", options_.input_dim, ")");
  // Whole numbers print as integers (12, not 12.0); beyond 2^53 (a float index, or a huge int64) as
  // the double they were read as, without an out-of-range conversion.
  const bool whole = bad.value > -9007199254740992.0 && bad.value < 9007199254740992.0;
  const std::string value = whole ? std::to_string(static_cast<std::int64_t>(bad.value)) : cat(bad.value);
  fail<std::invalid_argument>("[embedding] layer \"", name_, "\": index ", value, " at position ", where,
                              " of the input (shape ", to_string(x.shape()), ") is outside [0, ", options_.input_dim,
                              ") (input_dim=", options_.input_dim, ")");
}

void Embedding::check_indices(const Tensor& x, std::int64_t first_row) {
  check_index_shape(x);
  index_rows(x, first_row);
}

Tensor Embedding::forward(const Tensor& x, const ForwardContext& ctx) {
  check_index_shape(x);
  index_rows(x, ctx.global_row_offset);  // every index, before anything is written
  index_shape_ = x.shape();
  const std::int64_t n = x.numel(), dim = options_.output_dim;
  ensure_buffer(y_, {n, dim}, dtype_, x.device());
  ops::embedding_lookup(embeddings_.value, rows_, y_);
  Shape out = x.shape();
  out.push_back(dim);
  return y_.reshape(out);
}

Tensor Embedding::output_mask() const {
  // Only the layers that read masks run on CPU devices for now (they check the mask's device and
  // shape): on another device there is no mask to give them.
  if (!options_.mask_zero || !rows_.device().is_cpu()) return Tensor();
  Tensor mask(index_shape_, dtype_, rows_.device());
  const std::int64_t* rows = rows_.data<std::int64_t>();
  dispatch_floating(dtype_, "embedding", [&](auto tag) {
    using T = decltype(tag);
    T* m = mask.data<T>();
    for (std::int64_t i = 0; i < mask.numel(); ++i) m[i] = rows[i] != 0 ? T(1) : T(0);
  });
  return mask;
}

Tensor Embedding::backward(const Tensor& dy, bool need_input_grad) {
  MDTRAIN_CHECK(!need_input_grad, std::invalid_argument, "[embedding] layer \"", name_,
                "\" has no gradient with respect to its input (indices are not differentiable): an Embedding "
                "must be the first layer of the model");
  ops::embedding_scatter_add(dy.reshape({-1, options_.output_dim}), rows_, embeddings_.grad);
  return Tensor();
}

std::vector<Parameter*> Embedding::parameters() {
  if (!built_) return {};
  return {&embeddings_};
}

double Embedding::regularization_loss() const {
  return regularizer_ && built_ ? regularizer_->loss(embeddings_.value) : 0.0;
}

void Embedding::add_regularization_gradients() {
  if (regularizer_ && built_) regularizer_->add_gradient(embeddings_.value, embeddings_.grad);
}

std::unique_ptr<Layer> Embedding::with_output_share(int shards, bool /*drop_activation*/) const {
  Options o = options_;
  o.output_dim /= shards;
  return std::make_unique<Embedding>(name_, o);
}

std::unique_ptr<Layer> Embedding::clone() const {
  auto copy = std::make_unique<Embedding>(name_, options_);
  copy->copy_build_state(*this);
  if (built_) copy->embeddings_ = Parameter(embeddings_.name, embeddings_.value.clone());
  return copy;
}

Json Embedding::config() const {
  Json c = Layer::config();
  c.set("input_dim", options_.input_dim);
  c.set("output_dim", options_.output_dim);
  c.set("embeddings_initializer", make_initializer(options_.embeddings_initializer)->config());
  c.set("embeddings_regularizer", regularizer_ ? regularizer_->config() : Json());
  c.set("mask_zero", options_.mask_zero);
  return c;
}

std::unique_ptr<Layer> Embedding::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  const Json constraint = c.get("embeddings_constraint", Json());
  MDTRAIN_CHECK(constraint.is_null(), std::invalid_argument, "[embedding] layer \"", name,
                "\": embeddings_constraint is not supported by mdtrain (weight constraints are not implemented), got ",
                constraint.dump());
  Options o;
  o.input_dim = c.at("input_dim").as_int();
  o.output_dim = c.at("output_dim").as_int();
  o.embeddings_initializer = c.get("embeddings_initializer", "uniform");
  o.embeddings_regularizer = c.get("embeddings_regularizer", Json());
  o.mask_zero = c.get("mask_zero", false).as_bool();
  return std::make_unique<Embedding>(name, o);
}

}  // namespace mdtrain
