#pragma once
// Shared by the binding files: the per-area init functions and NumPy <-> Tensor conversion.
// This directory is the only place that includes pybind11.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "mdtrain/core/json.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain {
struct CollectiveCounts;
}

namespace mdtrain::bindings {

namespace py = pybind11;

void init_core(py::module_& m);
void init_nn(py::module_& m);
void init_conv_layers(py::module_& m);           // Conv2D, pooling, Reshape (after init_nn: they derive from Layer)
void init_normalization_layers(py::module_& m);  // BatchNormalization, LayerNormalization (after init_nn)
void init_optim(py::module_& m);
void init_losses_and_metrics(py::module_& m);
void init_strategy(py::module_& m);
void init_pipeline(py::module_& m);
void init_wavefront(py::module_& m);  // wavefront_bindings.cpp
void init_mesh(py::module_& m);       // DeviceMesh
void init_model(py::module_& m);
void init_data(py::module_& m);
void init_distribute(py::module_& m);  // communicators, MPI world info
void init_ps(py::module_& m);          // parameter server: layout, shard server, client
void init_tape(py::module_& m);        // what GradientTape needs: layer forward/backward, weight views

// {kind: {'calls', 'bytes'}} of the collective kinds called (step_plan_bindings.cpp).
py::dict collective_counts_dict(const CollectiveCounts& counts);

// A Tensor viewing a C-contiguous NumPy array without copying; the array stays alive as long as
// the Tensor (released under the GIL). The Python side converts dtypes and layout first.
Tensor tensor_from_numpy(const py::array& array);
// A NumPy array that owns (shares) the tensor's storage, no copy.
py::array numpy_from_tensor(const Tensor& tensor);

// Declared shapes (a layer's or model's, the batch axis excluded) cross as lists with None for an
// unknown dimension (kUnknownDim here, core/shape.h): Python never sees -1.
py::list shape_to_py(const Shape& shape);
Shape shape_from_py(const py::handle& shape);
std::vector<Shape> shapes_from_py(const py::handle& shapes);
py::list shapes_to_py(const std::vector<Shape>& shapes);

// JSON crosses the boundary as text: Python's json module on one side, Json on the other.
inline Json json_arg(const std::string& text) { return Json::parse(text); }

}  // namespace mdtrain::bindings
