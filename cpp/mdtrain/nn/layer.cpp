#include "mdtrain/nn/layer.h"

#include <algorithm>

#include "mdtrain/core/allocation_budget.h"

namespace mdtrain {

void Layer::build(const Shape& input_shape, std::uint64_t seed, DType dtype) {
  MDTRAIN_CHECK(is_floating(dtype), std::invalid_argument, "[layer] layer \"", name_, "\" needs a floating dtype, got ",
                name_of(dtype));
  for (auto d : input_shape)
    MDTRAIN_CHECK(d > 0 || d == kUnknownDim, std::invalid_argument, "[layer] layer \"", name_,
                  "\" cannot be built for input shape ", to_string(input_shape),
                  ": every dimension must be positive or None");
  MDTRAIN_CHECK(!has_unknown_dim(input_shape) || supports_unknown_dims(), std::invalid_argument, "[layer] layer \"",
                name_, "\" (", class_name(), ") needs every dimension of its input known, got input shape ",
                to_string(input_shape));
  Shape out = compute_output_shape(input_shape);
  dtype_ = dtype;
  input_shape_ = input_shape;
  output_shape_ = out;
  try {
    build_weights(input_shape, seed);
  } catch (const AllocationBudgetExceeded&) {
    throw;  // a loader's budget (core/allocation_budget.h): its caller names the file
  } catch (const AllocationError& e) {
    fail<AllocationError>("[layer] the weights of layer \"", name_, "\" (", class_name(), ") for input shape ",
                          to_string(input_shape), " cannot be allocated: ", e.what());
  }
  built_ = true;
}

void Layer::check_input(const Tensor& x) const {
  MDTRAIN_CHECK(built_, std::logic_error, "[layer] layer \"", name_, "\" was called before it was built");
  if (!fits_declared(input_shape_, sample_shape(x))) {
    Shape expected{-1};
    expected.insert(expected.end(), input_shape_.begin(), input_shape_.end());
    fail<std::invalid_argument>("[layer] Input 0 of layer \"", name_,
                                "\" is incompatible with the layer: expected shape ", to_string(expected),
                                ", but received input with shape ", to_string(x.shape()));
  }
  MDTRAIN_CHECK(x.dtype() == dtype_, std::invalid_argument, "[layer] layer \"", name_, "\" expects ", name_of(dtype_),
                " input, got ", name_of(x.dtype()));
}

void Layer::require_known_dim(const Shape& input_shape, int axis, const char* what) const {
  const int rank = static_cast<int>(input_shape.size()), a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank || input_shape[static_cast<std::size_t>(a)] != kUnknownDim) return;
  Shape full{kUnknownDim};
  full.insert(full.end(), input_shape.begin(), input_shape.end());
  fail<std::invalid_argument>("[layer] layer \"", name_, "\" (", class_name(), ") needs axis ", a + 1,
                              " of its input known (", what, "), got input shape ", to_string(full));
}

Tensor Layer::logits() const {
  fail<std::logic_error>("[layer] layer \"", name_, "\" (", class_name(), ") has no logits");
}

Tensor Layer::backward_from_logits(const Tensor&, bool) {
  fail<std::logic_error>("[layer] layer \"", name_, "\" (", class_name(), ") has no logits");
}

std::unique_ptr<Layer> Layer::with_output_share(int /*shards*/, bool /*drop_activation*/) const {
  fail<std::logic_error>("[layer] layer \"", name_, "\" (", class_name(), ") has no column-parallel form");
}

void Layer::apply_trainable() {
  const std::vector<Parameter*> weights = parameters();
  if (own_trainable_.size() != weights.size()) {
    own_trainable_.clear();
    for (const auto* p : weights) own_trainable_.push_back(p->trainable);
  }
  for (std::size_t k = 0; k < weights.size(); ++k) weights[k]->trainable = own_trainable_[k] && trainable_;
}

Json Layer::config() const {
  Json c = Json::object();
  c.set("name", name_);
  c.set("trainable", trainable_);
  c.set("dtype", name_of(dtype_));
  return c;
}

Shape sample_shape(const Tensor& x) { return Shape(x.shape().begin() + (x.ndim() > 0 ? 1 : 0), x.shape().end()); }

void ensure_buffer(Tensor& t, const Shape& shape, DType dtype, const Device& device) {
  if (!t.defined() || t.shape() != shape || t.dtype() != dtype || t.device() != device)
    t = Tensor(shape, dtype, device);
}

std::int64_t Layer::bytes_of(std::initializer_list<const Tensor*> tensors) {
  std::int64_t sum = 0;
  std::vector<const void*> seen;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    const void* storage = t->storage().get();
    if (std::find(seen.begin(), seen.end(), storage) != seen.end()) continue;
    seen.push_back(storage);
    sum += static_cast<std::int64_t>(t->nbytes());
  }
  return sum;
}

}  // namespace mdtrain
