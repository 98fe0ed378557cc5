#include "bindings.h"
#include "mdtrain/nn/conv2d.h"
#include "mdtrain/nn/global_average_pooling2d.h"
#include "mdtrain/nn/pooling2d.h"
#include "mdtrain/nn/reshape.h"

namespace mdtrain::bindings {

void init_conv_layers(py::module_& m) {
  py::class_<Conv2D, Layer, std::shared_ptr<Conv2D>>(m, "Conv2D")
      .def(py::init([](const std::string& name, std::int64_t filters, const std::vector<std::int64_t>& kernel_size,
                       const std::vector<std::int64_t>& strides, const std::string& padding,
                       const std::string& data_format, const std::vector<std::int64_t>& dilation_rate,
                       const std::string& activation, bool use_bias, const std::string& kernel_initializer,
                       const std::string& bias_initializer, const std::string& kernel_regularizer,
                       const std::string& bias_regularizer) {
             Conv2D::Options o;
             o.filters = filters;
             o.kernel_size = kernel_size;
             o.strides = strides;
             o.padding = padding;
             o.data_format = data_format;
             o.dilation_rate = dilation_rate;
             o.activation = activation;
             o.use_bias = use_bias;
             o.kernel_initializer = json_arg(kernel_initializer);
             o.bias_initializer = json_arg(bias_initializer);
             o.kernel_regularizer = json_arg(kernel_regularizer);
             o.bias_regularizer = json_arg(bias_regularizer);
             return std::make_shared<Conv2D>(name, o);
           }),
           py::arg("name"), py::arg("filters"), py::arg("kernel_size"), py::arg("strides"), py::arg("padding"),
           py::arg("data_format"), py::arg("dilation_rate"), py::arg("activation"), py::arg("use_bias"),
           py::arg("kernel_initializer_json"), py::arg("bias_initializer_json"), py::arg("kernel_regularizer_json"),
           py::arg("bias_regularizer_json"));

  // strides empty: pool_size (Keras's strides=None).
  auto pooling_options = [](const std::vector<std::int64_t>& pool_size, const std::vector<std::int64_t>& strides,
                            const std::string& padding, const std::string& data_format) {
    Pooling2D::Options o;
    o.pool_size = pool_size;
    o.strides = strides;
    o.padding = padding;
    o.data_format = data_format;
    return o;
  };
  py::class_<Pooling2D, Layer, std::shared_ptr<Pooling2D>>(m, "Pooling2D");
  py::class_<MaxPooling2D, Pooling2D, std::shared_ptr<MaxPooling2D>>(m, "MaxPooling2D")
      .def(py::init([pooling_options](const std::string& name, const std::vector<std::int64_t>& pool_size,
                                      const std::vector<std::int64_t>& strides, const std::string& padding,
                                      const std::string& data_format) {
             return std::make_shared<MaxPooling2D>(name, pooling_options(pool_size, strides, padding, data_format));
           }),
           py::arg("name"), py::arg("pool_size"), py::arg("strides"), py::arg("padding"), py::arg("data_format"));
  py::class_<AveragePooling2D, Pooling2D, std::shared_ptr<AveragePooling2D>>(m, "AveragePooling2D")
      .def(py::init([pooling_options](const std::string& name, const std::vector<std::int64_t>& pool_size,
                                      const std::vector<std::int64_t>& strides, const std::string& padding,
                                      const std::string& data_format) {
             return std::make_shared<AveragePooling2D>(name, pooling_options(pool_size, strides, padding, data_format));
           }),
           py::arg("name"), py::arg("pool_size"), py::arg("strides"), py::arg("padding"), py::arg("data_format"));
  py::class_<GlobalAveragePooling2D, Layer, std::shared_ptr<GlobalAveragePooling2D>>(m, "GlobalAveragePooling2D")
      .def(py::init<std::string, bool, std::string>(), py::arg("name"), py::arg("keepdims"), py::arg("data_format"));
  py::class_<Reshape, Layer, std::shared_ptr<Reshape>>(m, "Reshape")
      .def(py::init<std::string, Shape>(), py::arg("name"), py::arg("target_shape"));
}

}  // namespace mdtrain::bindings
