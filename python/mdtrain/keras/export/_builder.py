"""An ONNX graph under construction: nodes, weights (initializers) and unique value names.

Only this module and _model_graph.py touch the `onnx` package; the layer converters call the
builder's methods. `onnx` is an optional dependency (the `export` extra), so it is imported here
at the top and its absence is reported when an export is asked for (onnx_available).
"""
import numpy as np

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # reported by require_onnx() when an ONNX export is asked for
    onnx = TensorProto = helper = numpy_helper = None

# The opset the exporter writes by default, and the lowest it writes (LayerNormalization: 17).
DEFAULT_OPSET = 17
MIN_OPSET = 17


def require_onnx():
    if onnx is None:
        raise ImportError('model.export(format="onnx") needs the `onnx` package: pip install onnx '
                          "(and onnxruntime to run the exported model)")


def onnx_dtype(dtype):
    """The TensorProto element type of a NumPy dtype name (float32, int32, int64)."""
    return {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32, "int64": TensorProto.INT64}[np.dtype(dtype).name]


class GraphBuilder:
    """Collects the nodes and initializers of one graph; every method returns the name(s) of the
    value(s) it makes. Names are unique: a hint is suffixed with _1, _2, ... when taken."""

    def __init__(self, opset):
        self.opset = int(opset)
        self.nodes = []
        self.initializers = []
        self._taken = set()
        self._scalars = {}

    def name(self, hint):
        hint = hint.replace(" ", "_") or "value"
        name, k = hint, 0
        while name in self._taken:
            k += 1
            name = f"{hint}_{k}"
        self._taken.add(name)
        return name

    def reserve(self, name):
        """Takes `name` as it is (a graph input or output): it must not be taken yet."""
        if name in self._taken:
            raise ValueError(f"ONNX export: the value name {name!r} is used twice")
        self._taken.add(name)
        return name

    # ---- constants --------------------------------------------------------------------
    def const(self, value, hint, dtype=np.float32):
        """An initializer holding `value` (cast to dtype); a scalar of the same hint and value is
        made once and shared."""
        array = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        key = (hint, array.dtype.str, array.tobytes()) if array.ndim == 0 else None
        if key is not None and key in self._scalars:
            return self._scalars[key]
        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(array, name))
        if key is not None:
            self._scalars[key] = name
        return name

    def ints(self, values, hint="axes"):
        return self.const(np.asarray(values, dtype=np.int64), hint, np.int64)

    # ---- nodes ------------------------------------------------------------------------
    def op(self, op_type, inputs, hint, outputs=1, **attrs):
        """A node of op_type on `inputs` (value names; "" for an absent optional input); returns its
        output name, or a list of `outputs` names when outputs > 1."""
        names = [self.name(hint if outputs == 1 else f"{hint}_{k}") for k in range(outputs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=self.name(f"{hint}/{op_type}"),
                                           **attrs))
        return names[0] if outputs == 1 else names

    def reduce(self, op_type, x, axes, hint, keepdims=False):
        """ReduceMean/ReduceMax/ReduceSum over `axes`: axes are an attribute before opset 18 (13 for
        ReduceSum) and an input since."""
        input_since = 13 if op_type == "ReduceSum" else 18
        if self.opset >= input_since:
            return self.op(op_type, [x, self.ints(axes)], hint, keepdims=int(keepdims))
        return self.op(op_type, [x], hint, axes=list(axes), keepdims=int(keepdims))

    def unsqueeze(self, x, axes, hint):
        return self.op("Unsqueeze", [x, self.ints(axes)], hint)

    def squeeze(self, x, axes, hint):
        return self.op("Squeeze", [x, self.ints(axes)], hint)

    def reverse_time(self, x, steps, hint):
        """x (batch, steps, ...) with axis 1 reversed (steps is static)."""
        return self.op("Gather", [x, self.ints(list(range(steps - 1, -1, -1)), "reversed_steps")], hint, axis=1)

    def all_steps(self, x, hint):
        """An all-true bool (batch, steps) mask for x (batch, steps, ...): an unmasked input's."""
        shape = self.op("Shape", [x], f"{hint}/shape", start=0, end=2)
        true = helper.make_tensor("true", TensorProto.BOOL, [1], [True])
        return self.op("ConstantOfShape", [shape], hint, value=true)
