"""A built model as one ONNX graph: its structure (a Sequential model's stack, or the functional
graph that Functional and traced subclassed models share, _FunctionalGraph), each layer through
its family's converter, the masks handed along the edges as the C++ runners hand them
(nn/layer_stack.cpp, nn/layer_graph.cpp), and inputs and outputs with a dynamic batch axis."""
import numpy as np

from mdtrain._version import __version__
from mdtrain.keras.export import (_builder, _conv, _core_layers, _embedding, _merge, _normalization, _recurrent,
                                   _reshaping)
from mdtrain.keras.export._builder import GraphBuilder, helper, onnx
from mdtrain.keras.export._layer_view import LayerView

# The converter of each C++ layer class (layer._core.class_name; PipelineSplit is an Activation).
CONVERTERS = {**_core_layers.CONVERTERS, **_conv.CONVERTERS, **_normalization.CONVERTERS, **_embedding.CONVERTERS,
              **_merge.CONVERTERS, **_recurrent.CONVERTERS, **_reshaping.CONVERTERS}
# Layers that are not mask makers or readers but hand their input's mask on (nn/sequence_mask.cpp
# passes_mask); every other one drops it.
PASSES_MASK = ("Dense", "Dropout", "Activation", "LayerNormalization", "Identity", "ReLU", "LeakyReLU", "ELU", "PReLU",
               "UnitNormalization", "GaussianNoise", "GaussianDropout", "SpatialDropout1D", "SpatialDropout2D",
               "ActivityRegularization")
_INDEX_DTYPES = ("int32", "int64", "float32")


def structure(model):
    """(input names, input shapes, [(layer, value numbers)], output value numbers) of a built
    model: values 0..inputs-1 are its inputs, node i makes value inputs + i."""
    graph = model._graph
    if graph is not None:
        return list(graph.input_names), list(graph.input_shapes), list(graph.nodes), list(graph.outputs)
    layers = model._layers
    return (["input_layer"], [tuple(model._core.input_shape)], [(layer, [k]) for k, layer in enumerate(layers)],
            [len(layers)])


def _spec_list(input_signature):
    """input_signature as a list of specs: one spec (it has .shape) or one bare shape is a list of
    one."""
    if hasattr(input_signature, "shape"):
        return [input_signature]
    items = list(input_signature)
    if items and all(d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool)) for d in items):
        return [tuple(items)]
    return items


def _signature(model, names, shapes, index_inputs, input_signature):
    """[(dtype, batch dim or None)] per input, from input_signature (Keras: a list of specs, one per
    input; a spec is anything with .shape and .dtype, or a shape) or the defaults."""
    defaults = [("int32" if k in index_inputs else "float32", None) for k in range(len(names))]
    if input_signature is None:
        return defaults
    specs = _spec_list(input_signature)
    if len(specs) != len(names):
        raise ValueError(f"export: input_signature has {len(specs)} entries, model '{model.name}' has {len(names)} "
                         f"inputs {names}")
    out = []
    for k, (spec, name, shape) in enumerate(zip(specs, names, shapes)):
        given = tuple(getattr(spec, "shape", spec))
        dtype = getattr(spec, "dtype", None)
        dtype = defaults[k][0] if dtype is None else np.dtype(getattr(dtype, "as_numpy_dtype", dtype)).name
        if len(given) != len(shape) + 1 or any(d is not None and d != s for d, s in zip(given[1:], shape)):
            raise ValueError(f"export: input_signature[{k}] has shape {given}, input '{name}' of model "
                             f"'{model.name}' is {(None, *shape)}")
        allowed = _INDEX_DTYPES if k in index_inputs else ("float32",)
        if dtype not in allowed:
            raise ValueError(f"export: input_signature[{k}] has dtype {dtype}; input '{name}' takes "
                             f"{' or '.join(allowed)}")
        batch = given[0]
        if batch is not None and (not isinstance(batch, (int, np.integer)) or batch <= 0):
            raise ValueError(f"export: input_signature[{k}]: the batch dimension must be None or a positive int, "
                             f"got {batch!r}")
        out.append((dtype, None if batch is None else int(batch)))
    return out


def _value_info(name, dtype, batch, shape):
    return helper.make_tensor_value_info(name, _builder.onnx_dtype(dtype), ["batch" if batch is None else batch,
                                                                           *shape])


def to_onnx(model, opset=_builder.DEFAULT_OPSET, input_signature=None):
    """The model's inference graph as an onnx.ModelProto (checked with onnx.checker)."""
    _builder.require_onnx()
    names, shapes, nodes, outputs = structure(model)
    for name, shape in zip(names, shapes):
        if any(d is None for d in shape):
            raise NotImplementedError(f"export: input '{name}' of model '{model.name}' has a variable-length axis "
                                      f"{(None, *shape)}; the ONNX graph is written for fixed sizes beyond the batch "
                                      "axis: export a copy of the model built for one length")
    # Inputs read only by Embedding layers take indices (int32 unless the signature says otherwise).
    readers = {k: [layer._core.class_name for layer, ids in nodes if k in ids] for k in range(len(names))}
    index_inputs = {k for k, classes in readers.items() if classes and all(c == "Embedding" for c in classes)}
    signature = _signature(model, names, shapes, index_inputs, input_signature)
    g = GraphBuilder(opset)
    values, dtypes, masks, value_shapes, graph_inputs = [], [], [], [], []
    for name, shape, (dtype, batch) in zip(names, shapes, signature):
        graph_inputs.append(_value_info(g.reserve(name), dtype, batch, shape))
        values.append(name)
        dtypes.append(dtype)
        masks.append(None)
        value_shapes.append(tuple(shape))
    output_names = [g.reserve(f"output_{k}") for k in range(len(outputs))]
    for layer, ids in nodes:
        class_name = layer._core.class_name
        convert = CONVERTERS.get(class_name)
        view = LayerView(layer, [value_shapes[i] for i in ids])
        if convert is None:
            view.refuse(f"there is no ONNX converter for its C++ layer {class_name!r} (exportable: "
                        f"{', '.join(sorted(CONVERTERS))})")
        inputs = []
        for i in ids:  # Embedding reads integers (whole floats too, as predict takes them); the others floats
            wanted = ("int32", "int64") if class_name == "Embedding" else ("float32",)
            inputs.append(values[i] if dtypes[i] in wanted else g.op(
                "Cast", [values[i]], f"{values[i]}/as_{wanted[-1]}", to=_builder.onnx_dtype(wanted[-1])))
        result = convert(g, view, inputs, [masks[i] for i in ids])
        if isinstance(result, tuple):
            value, mask = result
        else:
            value, mask = result, (masks[ids[0]] if class_name in PASSES_MASK else None)
        dtypes.append("float32")
        values.append(value)
        masks.append(mask)
        value_shapes.append(view.output_shape)
    graph_outputs = []
    batch = next((b for _, b in signature if b is not None), None)
    for name, v in zip(output_names, outputs):
        g.nodes.append(helper.make_node("Identity", [values[v]], [name], name=g.name(f"{name}/Identity")))
        graph_outputs.append(_value_info(name, "float32", batch, value_shapes[v]))
    graph = helper.make_graph(g.nodes, model.name, graph_inputs, graph_outputs, g.initializers)
    opsets = [helper.make_opsetid("", opset)]
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="mdtrain",
                              producer_version=__version__, ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(proto, full_check=True)
    return proto
