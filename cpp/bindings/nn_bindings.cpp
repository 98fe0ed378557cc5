#include "bindings.h"
#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/embedding.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/bidirectional.h"
#include "mdtrain/nn/gru.h"
#include "mdtrain/nn/lstm.h"
#include "mdtrain/nn/simple_rnn.h"
#include "mdtrain/nn/concatenate.h"
#include "mdtrain/nn/dot.h"
#include "mdtrain/nn/elementwise_merge.h"
#include "mdtrain/nn/merge_layer.h"

namespace mdtrain::bindings {

namespace {
py::list layer_weights(Layer& layer) {
  py::list out;
  for (auto* p : layer.parameters()) out.append(numpy_from_tensor(p->value.clone()));
  return out;
}

void set_layer_weights(Layer& layer, const std::vector<py::array>& arrays) {
  auto params = layer.parameters();
  if (arrays.size() != params.size())
    fail<std::invalid_argument>("[set_weights] layer \"", layer.name(), "\" expects ", params.size(),
                                " weight arrays, got ", arrays.size());
  std::vector<Tensor> tensors;
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    tensors.push_back(tensor_from_numpy(arrays[i]));
    if (tensors.back().shape() != params[i]->value.shape())
      fail<std::invalid_argument>("[set_weights] layer \"", layer.name(), "\" weight ", params[i]->name, " has shape ",
                                  to_string(params[i]->value.shape()), ", got ", to_string(tensors.back().shape()));
  }
  for (std::size_t i = 0; i < arrays.size(); ++i) params[i]->value.copy_from(tensors[i]);
}
}  // namespace

void init_nn(py::module_& m) {
  py::class_<Layer, std::shared_ptr<Layer>>(m, "Layer")
      .def_property_readonly("name", &Layer::name)
      .def_property_readonly("class_name", &Layer::class_name)
      .def_property_readonly("built", &Layer::built)
      .def_property("trainable", &Layer::trainable, &Layer::set_trainable,
                    "Keras's layer.trainable: takes effect when the model packs its weights (compile).")
      .def_property_readonly("input_shape", [](const Layer& l) { return shape_to_py(l.input_shape()); })
      .def_property_readonly("output_shape", [](const Layer& l) { return shape_to_py(l.output_shape()); })
      .def("compute_output_shape",
           [](const Layer& l, const py::object& shape) {
             return shape_to_py(l.compute_output_shape(shape_from_py(shape)));
           })
      .def("config_json", [](const Layer& l) { return l.config().dump(); })
      .def("get_weights", &layer_weights)
      .def("set_weights", &set_layer_weights)
      .def("weight_names",
           [](Layer& l) {
             std::vector<std::string> names;
             for (auto* p : l.parameters()) names.push_back(p->name);
             return names;
           })
      .def(
          "weight_trainable",
          [](Layer& l) {
            // Each weight's own kind, whatever layer.trainable is: a frozen layer's flags are all
            // false, so they are read with the layer unfrozen for a moment.
            const bool trainable = l.trainable();
            l.set_trainable(true);
            l.apply_trainable();
            std::vector<bool> flags;
            for (auto* p : l.parameters()) flags.push_back(p->trainable);
            l.set_trainable(trainable);
            l.apply_trainable();
            return flags;
          },
          "Per weight, in get_weights order: trained by the optimizer when the layer is trainable (False: e.g. "
          "moving statistics).")
      .def("count_params", [](Layer& l) {
        std::int64_t n = 0;
        for (auto* p : l.parameters()) n += p->value.numel();
        return n;
      });

  // The layer classes are registered as types only (so a layer shows as _core.Dense, not _core.Layer):
  // layers are made by layer_from_config, from their Keras config, whether Python asks or a model
  // file does; there are no per-layer constructors here.
  py::class_<Dense, Layer, std::shared_ptr<Dense>>(m, "Dense");
  py::class_<ActivationLayer, Layer, std::shared_ptr<ActivationLayer>>(m, "Activation");
  py::class_<Flatten, Layer, std::shared_ptr<Flatten>>(m, "Flatten");
  py::class_<Dropout, Layer, std::shared_ptr<Dropout>>(m, "Dropout");
  py::class_<Embedding, Layer, std::shared_ptr<Embedding>>(m, "Embedding")
      .def(
          "check_indices",
          [](Embedding& e, const py::array& x) {
            const Tensor t = tensor_from_numpy(x);
            py::gil_scoped_release release;
            e.check_indices(t);
          },
          py::arg("x"),
          "Raises ValueError naming the first index of x (rows of inputs) that is not a whole number in "
          "[0, input_dim), before any training step runs.");
  py::class_<RecurrentLayer, Layer, std::shared_ptr<RecurrentLayer>>(m, "RecurrentLayer");
  py::class_<SimpleRNN, RecurrentLayer, std::shared_ptr<SimpleRNN>>(m, "SimpleRNN");
  py::class_<LSTM, RecurrentLayer, std::shared_ptr<LSTM>>(m, "LSTM");
  py::class_<GRU, RecurrentLayer, std::shared_ptr<GRU>>(m, "GRU");
  py::class_<Bidirectional, Layer, std::shared_ptr<Bidirectional>>(m, "Bidirectional");
  py::class_<MergeLayer, Layer, std::shared_ptr<MergeLayer>>(m, "MergeLayer")
      .def(
          "merged_shape",
          [](const MergeLayer& l, const py::object& shapes) {
            return shape_to_py(l.merged_shape(shapes_from_py(shapes)));
          },
          py::arg("input_shapes"),
          "The output shape (batch axis excluded) for these input shapes; ValueError naming the layer "
          "and the shapes when they cannot be merged.");
  py::class_<ElementwiseMerge, MergeLayer, std::shared_ptr<ElementwiseMerge>>(m, "ElementwiseMerge");
  py::class_<Add, ElementwiseMerge, std::shared_ptr<Add>>(m, "Add");
  py::class_<Multiply, ElementwiseMerge, std::shared_ptr<Multiply>>(m, "Multiply");
  py::class_<Subtract, ElementwiseMerge, std::shared_ptr<Subtract>>(m, "Subtract");
  py::class_<Average, ElementwiseMerge, std::shared_ptr<Average>>(m, "Average");
  py::class_<Maximum, ElementwiseMerge, std::shared_ptr<Maximum>>(m, "Maximum");
  py::class_<Minimum, ElementwiseMerge, std::shared_ptr<Minimum>>(m, "Minimum");
  py::class_<Dot, MergeLayer, std::shared_ptr<Dot>>(m, "Dot");
  py::class_<Concatenate, MergeLayer, std::shared_ptr<Concatenate>>(m, "Concatenate");
  m.def(
      "layer_from_config",
      [](const std::string& spec) { return std::shared_ptr<Layer>(layer_from_config(Json::parse(spec))); },
      py::arg("spec_json"),
      "The layer of {\"class_name\": ..., \"config\": {...}} (JSON text), as a model file holds it.");
  m.def("layer_class_names", &layer_class_names);
  m.def("parse_activation", [](const std::string& name) { return std::string(name_of(parse_activation(name))); });
  m.def(
      "activation_names",
      [] {
        std::vector<std::string> names;
        for (Activation a : all_activations()) names.emplace_back(name_of(a));
        return names;
      },
      "The Keras names of the activations the C++ step applies (Dense, Conv2D, Activation).");
}

}  // namespace mdtrain::bindings
