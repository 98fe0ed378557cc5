// _core.WavefrontExecutor: the wavefront pipeline of a compiled Sequential model's recurrent stack
// (strategy/wavefront_executor.h), driven by keras.distribution.WavefrontPipeline.
#include "bindings.h"
#include "mdtrain/model/model.h"
#include "mdtrain/strategy/wavefront_executor.h"

namespace mdtrain::bindings {

namespace {

// Keeps the model (its layers, loss and optimizer) alive as long as the executor.
struct BoundWavefront {
  std::shared_ptr<Model> model;
  std::unique_ptr<WavefrontExecutor> executor;
};

}  // namespace

void init_wavefront(py::module_& m) {
  py::class_<BoundWavefront>(m, "WavefrontExecutor")
      .def(py::init([](std::shared_ptr<Model> model, int devices, std::int64_t time_chunk) {
             MDTRAIN_CHECK(!model->is_functional(), std::invalid_argument,
                           "[wavefront] only Sequential models can be cut into a wavefront pipeline");
             MDTRAIN_CHECK(model->compiled(), std::invalid_argument, "[wavefront] compile the model first");
             auto bound = std::make_unique<BoundWavefront>();
             bound->executor =
                 std::make_unique<WavefrontExecutor>(model->stack(), devices, time_chunk, model->loss(), model->optimizer());
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
}

}  // namespace mdtrain::bindings
