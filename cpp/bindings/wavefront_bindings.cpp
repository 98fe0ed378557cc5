// _core.WavefrontExecutor: the wavefront pipeline of a compiled Sequential model's recurrent stack
// (strategy/wavefront_executor.h), driven by keras.distribution.WavefrontPipeline; and the
// recurrent layers' state API (nn/recurrent_layer.h) for eager calls with initial_state /
// return_state (python/mdtrain/_eager/keras_layers.py). Both exist for time-chunked recurrence.
#include "bindings.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/recurrent_layer.h"
#include "mdtrain/strategy/wavefront_executor.h"

namespace mdtrain::bindings {

namespace {

// Keeps the model (its layers, loss and optimizer) alive as long as the executor.
struct BoundWavefront {
  std::shared_ptr<Model> model;
  std::unique_ptr<WavefrontExecutor> executor;
};

RecurrentLayer& recurrent(Layer& layer) {
  auto* r = dynamic_cast<RecurrentLayer*>(&layer);
  MDTRAIN_CHECK(r != nullptr, std::invalid_argument, "[tape] layer \"", layer.name(), "\" is not a recurrent layer");
  return *r;
}

py::array host_copy(const Tensor& t) {
  Tensor host(t.shape(), t.dtype());
  host.copy_from(t);
  return numpy_from_tensor(host);
}

}  // namespace

void init_wavefront(py::module_& m) {
  py::class_<BoundWavefront>(m, "WavefrontExecutor")
      .def(py::init([](std::shared_ptr<Model> model, int devices, std::int64_t time_chunk) {
             MDTRAIN_CHECK(!model->is_functional(), std::invalid_argument,
                           "[wavefront] only Sequential models can be cut into a wavefront pipeline");
             MDTRAIN_CHECK(model->compiled(), std::invalid_argument, "[wavefront] compile the model first");
             auto bound = std::make_unique<BoundWavefront>();
             bound->executor = std::make_unique<WavefrontExecutor>(model->stack(), devices, time_chunk, model->loss(),
                                                                   model->optimizer());
             bound->model = std::move(model);
             return bound;
           }),
           py::arg("model"), py::arg("devices"), py::arg("time_chunk"))
      .def(
          "train_step",
          [](BoundWavefront& b, const py::array& x, const py::array& y) {
            Tensor tx = tensor_from_numpy(x), ty = tensor_from_numpy(y);
            py::gil_scoped_release release;
            return b.executor->train_step(tx, ty);
          },
          py::arg("x"), py::arg("y"))
      .def("stage_starts", [](const BoundWavefront& b) { return b.executor->stage_starts(); })
      .def_property_readonly("iterations", [](const BoundWavefront& b) { return b.executor->iterations(); });

  m.def(
      "rnn_state_forward",
      [](Layer& layer, const py::array& x, const std::vector<py::array>& initial_state, bool training,
         std::uint64_t step) {
        RecurrentLayer& r = recurrent(layer);
        Tensor tx = tensor_from_numpy(x);
        std::vector<Tensor> init;
        for (const auto& a : initial_state) init.push_back(tensor_from_numpy(a));
        ForwardContext ctx;
        ctx.training = training;
        ctx.step = step;
        Tensor y;
        {
          py::gil_scoped_release release;
          y = r.forward_from_state(tx, init, ctx);
        }
        py::list states;
        for (const Tensor& s : r.final_state()) states.append(host_copy(s));
        return py::make_tuple(host_copy(y), states);
      },
      py::arg("layer"), py::arg("x"), py::arg("initial_state"), py::arg("training"), py::arg("step"),
      "A recurrent layer's forward from initial states ([] = zeros): (y, [final states]).");
  m.def(
      "rnn_state_backward",
      [](Layer& layer, const py::array& dy, const std::vector<py::array>& final_state_grad, bool need_input_grad,
         bool need_state_grad) {
        RecurrentLayer& r = recurrent(layer);
        Tensor g = tensor_from_numpy(dy);
        std::vector<Tensor> dfinal;
        for (const auto& a : final_state_grad) dfinal.push_back(tensor_from_numpy(a));
        Tensor dx;
        {
          py::gil_scoped_release release;
          dx = r.backward_with_state(g, dfinal, need_input_grad, need_state_grad);
        }
        py::list dinit, weights;
        for (const Tensor& t : r.initial_state_gradient()) dinit.append(host_copy(t));
        for (Parameter* p : r.parameters())
          if (p->trainable) weights.append(host_copy(p->grad));
        return py::make_tuple(dx.defined() ? py::object(host_copy(dx)) : py::none(), dinit, weights);
      },
      py::arg("layer"), py::arg("grad"), py::arg("final_state_grad"), py::arg("need_input_grad"),
      py::arg("need_state_grad"),
      "Backward of rnn_state_forward: (dL/dx or None, [dL/d initial states], [dL/dw copies]).");
}

}  // namespace mdtrain::bindings
