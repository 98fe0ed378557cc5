// What the eager front end (python/mdtrain/_eager) needs of the C++ core to put layers, losses and
// optimizers on a GradientTape: one layer's forward and backward as separate calls, the weights as
// NumPy views (tf.Variable views of a model's weights), the gradients of the weight penalties, a
// loss's form on the logits of a softmax/sigmoid output, and an optimizer step over arrays.
#include "bindings.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/sequence_mask.h"
#include "mdtrain/optim/optimizer.h"

namespace mdtrain::bindings {

namespace {

std::vector<Parameter*> trainable_of(Layer& layer) {
  std::vector<Parameter*> out;
  for (auto* p : layer.parameters())
    if (p->trainable) out.push_back(p);
  return out;
}

// Host copies: a layer's buffers are reused by its next forward or backward.
py::array copy_out(const Tensor& t) {
  Tensor host(t.shape(), t.dtype());
  host.copy_from(t);
  return numpy_from_tensor(host);
}

// Views of the weights' .grad buffers (valid until the layer's next backward: the caller copies
// them, into memory it reuses), or copies.
py::list grads_of(const std::vector<Parameter*>& params, bool copy) {
  py::list out;
  for (auto* p : params) out.append(copy ? copy_out(p->grad) : numpy_from_tensor(p->grad));
  return out;
}

// A layer's forward. With `keep_state`, the values of its non-trainable weights (moving
// statistics a training forward updates) are put back afterwards: the tape runs a forward again
// only to restore the buffers an earlier call's backward needs, and that must not count twice.
py::tuple layer_forward(Layer& layer, const py::array& x, bool training, std::uint64_t step,
                        std::int64_t global_row_offset, bool keep_state) {
  MDTRAIN_CHECK(layer.built(), std::logic_error, "[tape] layer \"", layer.name(), "\" is not built");
  Tensor tx = tensor_from_numpy(x);
  std::vector<std::pair<Parameter*, Tensor>> saved;
  if (keep_state)
    for (auto* p : layer.parameters())
      if (!p->trainable) saved.emplace_back(p, p->value.clone());
  ForwardContext ctx;
  ctx.training = training;
  ctx.step = step;
  ctx.global_row_offset = global_row_offset;
  Tensor y;
  {
    py::gil_scoped_release release;
    y = layer.forward(tx, ctx);
  }
  for (auto& [p, value] : saved) p->value.copy_from(value);
  // The logits Keras's crossentropies use instead of a softmax or sigmoid output (Loss::on_logits_of).
  py::object logits = py::none();
  const Activation activation = layer.output_activation();
  if (activation == Activation::Softmax || activation == Activation::Sigmoid) logits = copy_out(layer.logits());
  return py::make_tuple(copy_out(y), logits);
}

// Backward of the layer's last forward from dL/dy, or from dL/d(logits) when `from_logits`.
// Returns (dL/dx or None, [dL/dw for each trainable weight, in parameters() order]); the weight
// gradients are views of the layer's buffers, which its next backward overwrites.
py::tuple layer_backward(Layer& layer, const py::array& grad, bool from_logits, bool need_input_grad) {
  Tensor g = tensor_from_numpy(grad);
  Tensor dx;
  {
    py::gil_scoped_release release;
    dx = from_logits ? layer.backward_from_logits(g, need_input_grad) : layer.backward(g, need_input_grad);
  }
  py::object dx_out = dx.defined() ? py::object(copy_out(dx)) : py::none();
  return py::make_tuple(dx_out, grads_of(trainable_of(layer), false));
}

// (regularization_loss, [its gradient for each trainable weight]); the weights' .grad buffers are
// left as they were.
py::tuple layer_regularization(Layer& layer) {
  auto params = trainable_of(layer);
  std::vector<Tensor> saved;
  for (auto* p : params) {
    saved.push_back(p->grad.clone());
    p->grad.fill(0.0);
  }
  layer.add_regularization_gradients();
  py::list grads = grads_of(params, true);
  for (std::size_t i = 0; i < params.size(); ++i) params[i]->grad.copy_from(saved[i]);
  return py::make_tuple(layer.regularization_loss(), grads);
}

// One optimizer step (Keras's apply_gradients) over variables given as writable arrays, updated
// in place: a model's weights (views of its Parameters) or a plain variable's storage.
void optimizer_apply(Optimizer& optimizer, const std::vector<py::array>& values, const std::vector<py::array>& grads,
                     const std::vector<std::string>& names) {
  MDTRAIN_CHECK(values.size() == grads.size() && values.size() == names.size(), std::invalid_argument,
                "[tape] apply_gradients: ", values.size(), " variables, ", grads.size(), " gradients and ",
                names.size(), " names");
  std::vector<Parameter> params(values.size());
  ParameterList list;
  for (std::size_t i = 0; i < values.size(); ++i) {
    MDTRAIN_CHECK(values[i].writeable(), std::invalid_argument, "[tape] apply_gradients: variable '", names[i],
                  "' is read-only");
    params[i].name = names[i];
    params[i].value = tensor_from_numpy(values[i]);
    params[i].grad = tensor_from_numpy(grads[i]);
    list.push_back(&params[i]);
  }
  py::gil_scoped_release release;
  optimizer.apply(list);
}

}  // namespace

void init_tape(py::module_& m) {
  // Masks on the eager path (nn/sequence_mask.h): float32 (batch, timesteps) arrays, None for none.
  m.def(
      "tape_layer_set_input_mask",
      [](Layer& layer, const py::object& mask) {
        auto* masked = dynamic_cast<MaskedLayer*>(&layer);
        if (masked == nullptr) return;
        masked->set_input_mask(mask.is_none() ? Tensor() : tensor_from_numpy(mask.cast<py::array>()).clone());
      },
      py::arg("layer"), py::arg("mask"), "Sets the mask of the layer's next forward's input (mask readers only).");
  m.def(
      "tape_layer_output_mask",
      [](Layer& layer, const py::object& input_mask) -> py::object {
        auto* masked = dynamic_cast<MaskedLayer*>(&layer);
        if (masked == nullptr) return passes_mask(layer) ? input_mask : py::none();
        const Tensor mask = masked->output_mask();
        if (!mask.defined()) return py::none();
        return numpy_from_tensor(mask.clone());
      },
      py::arg("layer"), py::arg("input_mask"), "The mask the output of the layer's last forward carries, or None.");
  m.def("tape_layer_forward", &layer_forward, py::arg("layer"), py::arg("x"), py::arg("training"), py::arg("step"),
        py::arg("global_row_offset") = 0, py::arg("keep_state") = false,
        "(y, logits or None): one forward of a built layer, outputs copied out.");
  m.def("tape_layer_backward", &layer_backward, py::arg("layer"), py::arg("grad"), py::arg("from_logits"),
        py::arg("need_input_grad"), "(dx or None, [trainable weight gradients]) of the layer's last forward.");
  m.def("tape_layer_regularization", &layer_regularization, py::arg("layer"),
        "(weight penalty, [its gradient per trainable weight]).");
  m.def(
      "tape_build_layer",
      [](Layer& layer, const py::object& input_shape, std::uint64_t seed) {
        layer.build(shape_from_py(input_shape), seed);
      },
      py::arg("layer"), py::arg("input_shape"), py::arg("seed"), "Builds a layer on its own (no model).");
  m.def(
      "tape_layer_activation", [](const Layer& layer) { return std::string(name_of(layer.output_activation())); },
      py::arg("layer"));
  m.def(
      "tape_weight_view",
      [](Layer& layer, std::size_t index) {
        auto params = layer.parameters();
        MDTRAIN_CHECK(index < params.size(), std::out_of_range, "[tape] layer \"", layer.name(), "\" has ",
                      params.size(), " weights, not ", index + 1);
        MDTRAIN_CHECK(params[index]->value.device().is_cpu(), std::logic_error, "[tape] weight ", params[index]->name,
                      " is not on the host");
        return numpy_from_tensor(params[index]->value);
      },
      py::arg("layer"), py::arg("index"), "A writable array sharing the storage of the layer's weight `index`.");
  m.def(
      "tape_logits_loss",
      [](const Loss& loss, const std::string& activation) -> std::shared_ptr<Loss> {
        return std::shared_ptr<Loss>(loss.on_logits_of(parse_activation(activation)));
      },
      py::arg("loss"), py::arg("activation"), "The loss on the logits of an output with this activation, or None.");
  m.def(
      "tape_loss_sample_count",
      [](const Loss& loss, const py::array& y_true, const py::array& y_pred) {
        return loss.sample_count(tensor_from_numpy(y_true), tensor_from_numpy(y_pred));
      },
      py::arg("loss"), py::arg("y_true"), py::arg("y_pred"), "Keras's divisor of the mean loss of this batch.");
  m.def("tape_optimizer_apply", &optimizer_apply, py::arg("optimizer"), py::arg("values"), py::arg("grads"),
        py::arg("names"));
}

}  // namespace mdtrain::bindings
