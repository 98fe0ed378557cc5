// _core.WavefrontStrategy: the wavefront pipeline of a Sequential model's recurrent stack
// (strategy/wavefront_strategy.h), keras.distribution.WavefrontPipeline's C++ strategy; and the
// recurrent layers' state API (nn/recurrent_layer.h) for eager calls with initial_state /
// return_state (python/mdtrain/_eager/keras_layers.py). Both exist for time-chunked recurrence.
#include "bindings.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/nn/recurrent_layer.h"
#include "mdtrain/strategy/wavefront_executor.h"
#include "mdtrain/strategy/wavefront_strategy.h"

namespace mdtrain::bindings {

namespace {

WavefrontExecutor& compiled_executor(const WavefrontStrategy& s) {
  MDTRAIN_CHECK(s.executor() != nullptr, std::logic_error,
                "[wavefront] no model has been compiled and run a step under this strategy yet");
  return *s.executor();
}

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
  py::class_<WavefrontStrategy, Strategy, std::shared_ptr<WavefrontStrategy>>(m, "WavefrontStrategy")
      .def(py::init([](const DeviceMesh& mesh, std::int64_t time_chunk, const std::string& pipe_dim_name) {
             return std::make_shared<WavefrontStrategy>(mesh, time_chunk, pipe_dim_name);
           }),
           py::arg("mesh"), py::arg("time_chunk"), py::arg("pipe_dim_name") = "pipe")
      .def_property_readonly("num_stages", &WavefrontStrategy::num_stages)
      .def_property_readonly("time_chunk", &WavefrontStrategy::time_chunk)
      .def_property_readonly("mesh", &WavefrontStrategy::mesh)
      .def("stage_starts", [](const WavefrontStrategy& s) { return compiled_executor(s).stage_starts(); })
      .def(
          "stage_collectives",
          [](const WavefrontStrategy& s) {
            py::list out;
            for (const CollectiveCounts& c : compiled_executor(s).stage_collectives())
              out.append(collective_counts_dict(c));
            return out;
          },
          "Per stage (device), the calls and bytes of its sends and receives since the model's profile was reset.");

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
