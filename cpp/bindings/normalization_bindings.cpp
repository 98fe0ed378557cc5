#include "bindings.h"
#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/layer_normalization.h"

namespace mdtrain::bindings {

// The normalization layers. Python validates argument types and passes initializers and
// regularizers as Keras JSON (as for Dense); the C++ constructors validate values.
void init_normalization_layers(py::module_& m) {
  py::class_<BatchNormalization, Layer, std::shared_ptr<BatchNormalization>>(m, "BatchNormalization")
      .def(py::init([](const std::string& name, std::int64_t axis, double momentum, double epsilon, bool center,
                       bool scale, const std::string& beta_initializer, const std::string& gamma_initializer,
                       const std::string& moving_mean_initializer, const std::string& moving_variance_initializer,
                       const std::string& beta_regularizer, const std::string& gamma_regularizer,
                       bool synchronized) {
             BatchNormalization::Options o;
             o.axis = axis;
             o.momentum = momentum;
             o.epsilon = epsilon;
             o.center = center;
             o.scale = scale;
             o.beta_initializer = json_arg(beta_initializer);
             o.gamma_initializer = json_arg(gamma_initializer);
             o.moving_mean_initializer = json_arg(moving_mean_initializer);
             o.moving_variance_initializer = json_arg(moving_variance_initializer);
             o.beta_regularizer = json_arg(beta_regularizer);
             o.gamma_regularizer = json_arg(gamma_regularizer);
             o.synchronized = synchronized;
             return std::make_shared<BatchNormalization>(name, o);
           }),
           py::arg("name"), py::arg("axis"), py::arg("momentum"), py::arg("epsilon"), py::arg("center"),
           py::arg("scale"), py::arg("beta_initializer_json"), py::arg("gamma_initializer_json"),
           py::arg("moving_mean_initializer_json"), py::arg("moving_variance_initializer_json"),
           py::arg("beta_regularizer_json"), py::arg("gamma_regularizer_json"), py::arg("synchronized"));
  py::class_<LayerNormalization, Layer, std::shared_ptr<LayerNormalization>>(m, "LayerNormalization")
      .def(py::init([](const std::string& name, std::int64_t axis, double epsilon, bool center, bool scale,
                       const std::string& beta_initializer, const std::string& gamma_initializer,
                       const std::string& beta_regularizer, const std::string& gamma_regularizer) {
             LayerNormalization::Options o;
             o.axis = axis;
             o.epsilon = epsilon;
             o.center = center;
             o.scale = scale;
             o.beta_initializer = json_arg(beta_initializer);
             o.gamma_initializer = json_arg(gamma_initializer);
             o.beta_regularizer = json_arg(beta_regularizer);
             o.gamma_regularizer = json_arg(gamma_regularizer);
             return std::make_shared<LayerNormalization>(name, o);
           }),
           py::arg("name"), py::arg("axis"), py::arg("epsilon"), py::arg("center"), py::arg("scale"),
           py::arg("beta_initializer_json"), py::arg("gamma_initializer_json"), py::arg("beta_regularizer_json"),
           py::arg("gamma_regularizer_json"));
}

}  // namespace mdtrain::bindings
