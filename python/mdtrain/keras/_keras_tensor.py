"""The Functional API's symbolic side: keras.Input, KerasTensor and the layer calls on them.

Calling a layer on KerasTensors computes no numbers: it records a node (the layer and the tensors
it read) and returns a KerasTensor of the output shape. keras.Model(inputs, outputs) then walks the
nodes back from the outputs into a graph that C++ runs (nn/layer_graph.h); a subclassed model's
call() is traced the same way, so fit runs one graph whatever wrote it.
"""
from mdtrain.keras import _naming


class _Trace:
    """While a subclassed model's call() is traced: the layers it called and their first calls
    before it, so that a trace that fails leaves no layer.input/output behind."""

    active = None

    def __enter__(self):
        self.outer, self.layers = _Trace.active, []
        _Trace.active = self
        return self

    def __exit__(self, kind, value, tb):
        _Trace.active = self.outer
        if kind is not None:
            for layer, before in reversed(self.layers):
                layer._output_node = before


tracing = _Trace


class TracingError(TypeError):
    """A subclassed model's call() did something a graph of layers cannot hold."""


class _Node:
    __slots__ = ("layer", "inputs", "output", "replayed")

    def __init__(self, layer, inputs, replayed=False):
        # replayed: made by replay() for a built model's model.inputs/outputs, not by a call.
        self.layer, self.inputs, self.output, self.replayed = layer, inputs, None, replayed


class KerasTensor:
    """A symbolic tensor: a shape (batch axis None), a dtype, and the node that made it (None for an
    Input). It has no value: Python that needs one (if, bool, NumPy) raises TracingError."""

    def __init__(self, shape, dtype="float32", node=None, name=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self._node = node
        self.name = name

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        made_by = f"made by layer '{self._node.layer.name}'" if self._node is not None else f"input '{self.name}'"
        return f"<KerasTensor shape={self.shape}, dtype={self.dtype}, {made_by}>"

    def _no_value(self, what):
        raise TracingError(f"{what} needs the value of {self!r}, but a symbolic tensor has none: models are built "
                           "as graphs of layers, so Python control flow or NumPy on tensor values cannot be "
                           "traced; express it with layers")

    def __bool__(self):
        self._no_value("a Python condition (if/while/and/or)")

    def __array__(self, *args, **kwargs):
        self._no_value("NumPy")

    def __float__(self):
        self._no_value("float()")

    def __index__(self):
        self._no_value("an index")

    def _not_traceable(self, *args):
        raise TracingError(f"this operation on {self!r} cannot be traced: between symbolic tensors only + and * "
                           "(the Add and Multiply layers) are supported; express the rest with layers")

    __lt__ = __le__ = __gt__ = __ge__ = _not_traceable
    __sub__ = __rsub__ = __truediv__ = __rtruediv__ = __matmul__ = __rmatmul__ = __pow__ = _not_traceable
    __neg__ = __abs__ = __getitem__ = _not_traceable

    def __iter__(self):
        raise TracingError(f"{self!r} cannot be iterated over: it has one batch axis of unknown size")

    def __len__(self):
        raise TracingError(f"{self!r} has no len(): its batch axis has unknown size")

    # x + y and x * y on symbolic tensors are the Add and Multiply layers (Keras does the same).
    def __add__(self, other):
        return _merge("Add", self, other)

    __radd__ = __add__

    def __mul__(self, other):
        return _merge("Multiply", self, other)

    __rmul__ = __mul__


def _merge(class_name, a, b):
    from mdtrain.keras import layers

    if not isinstance(a, KerasTensor) or not isinstance(b, KerasTensor):
        raise TracingError(f"{class_name} of a symbolic tensor and {type(b).__name__} {b!r} cannot be traced: "
                           "only two symbolic tensors (layer outputs) can be added or multiplied")
    return getattr(layers, class_name)()([a, b])


def Input(shape=None, batch_size=None, dtype=None, name=None, batch_shape=None, sparse=None, tensor=None,
          optional=False, **kwargs):
    """keras.Input: a symbolic input of a functional model (or, added to a Sequential model, the
    declaration of its input shape)."""
    from mdtrain.keras.layers import _shape_tuple

    if kwargs.get("input_shape") is not None and shape is None:
        shape = kwargs.pop("input_shape")
    if kwargs:
        raise TypeError(f"Input: unrecognized keyword arguments {sorted(kwargs)}")
    if batch_shape is not None:
        shape = tuple(batch_shape)[1:]
    if shape is None:
        raise ValueError("Input: `shape` is required, e.g. keras.Input(shape=(784,))")
    if sparse or tensor is not None or optional:
        raise NotImplementedError("Input: sparse, tensor and optional inputs are not supported")
    if dtype not in (None, "float32", "int32", "int64"):
        raise ValueError(f"Input: dtype must be float32 (or an integer type for Embedding indices), got {dtype!r}")
    shape = _shape_tuple(shape, "shape", "Input")  # None: any size per batch (variable-length inputs)
    t = KerasTensor((None, *shape), dtype or "float32", name=name or _naming.unique_name("input_layer"))
    t.batch_size = batch_size
    return t


def is_symbolic(inputs):
    if isinstance(inputs, KerasTensor):
        return True
    return isinstance(inputs, (list, tuple)) and any(isinstance(t, KerasTensor) for t in inputs)


def call_symbolic(layer, inputs):
    """layer(inputs) on KerasTensors: records the node, returns the output KerasTensor. Shapes are
    checked here, so a graph that cannot run fails where it is written, naming the layer."""
    merge = getattr(layer, "_merge", False)
    if merge:
        if not isinstance(inputs, (list, tuple)) or len(inputs) < 2:
            raise ValueError(f'A merge layer should be called on a list of at least 2 inputs. Layer "{layer.name}" '
                             f"({type(layer).__name__}) got {inputs!r}")
        tensors = list(inputs)
    else:
        if isinstance(inputs, (list, tuple)):
            if len(inputs) != 1:
                raise ValueError(f'Layer "{layer.name}" ({type(layer).__name__}) takes one input, got {len(inputs)}')
            inputs = inputs[0]
        tensors = [inputs]
    for t in tensors:
        if not isinstance(t, KerasTensor):
            raise TypeError(f'Layer "{layer.name}" was called on a mix of symbolic tensors and {type(t).__name__}; '
                            "in a functional model every input of a layer must be a layer output or a keras.Input")
    shapes = [list(t.shape[1:]) for t in tensors]
    try:
        if merge:
            out = layer._core.merged_shape(shapes)
        else:
            out = layer._core.compute_output_shape(shapes[0])
    except (ValueError, RuntimeError) as e:
        given = ", ".join(str(t.shape) for t in tensors)
        raise ValueError(f'Layer "{layer.name}" ({type(layer).__name__}) cannot be called on inputs of shape '
                         f"{given}: {e}") from None
    mask_source = _mask_source_after(layer, tensors, merge)
    node = _Node(layer, tensors)
    # A layer called again (shared weights: a siamese branch, a model used twice) adds a node; its
    # layer.input / layer.output stay those of its first call, as in Keras.
    first = getattr(layer, "_output_node", None)
    if _Trace.active is not None:
        _Trace.active.layers.append((layer, first))
    if first is None or first.replayed:
        layer._output_node = node
    node.output = KerasTensor((None, *out), "float32", node=node, name=layer.name)
    node.output._mask_source = mask_source
    return node.output


def _mask_source_after(layer, tensors, merge):
    """The layer whose mask the output of `layer` on `tensors` carries (layers.mask_after; the graph
    runner passes masks along the edges, nn/layer_graph.h). A merge's output carries one (Keras 3's
    compute_mask) when every input of Add/Multiply has one, or any input of Concatenate."""
    incoming = [t._mask_source for t in tensors if getattr(t, "_mask_source", None) is not None]
    from mdtrain.keras.layers import mask_after
    if merge and incoming and type(layer).__name__ in ("Multiply", "Maximum", "Minimum"):
        # Keras's Multiply, Maximum and Minimum read masks: masked steps multiply as 1 or take the
        # other input's value, and the output is zeroed where the merged mask is 0
        # (keras/src/layers/merging/); mdtrain's merges do not yet.
        raise NotImplementedError(f'{type(layer).__name__} layer "{layer.name}" receives the mask of layer '
                                  f'"{incoming[0]}" in a functional model; Keras would treat masked steps specially, '
                                  "which mdtrain does not do yet (Add, Subtract, Average and Concatenate pass masks)")
    if merge and type(layer).__name__ == "Dot":
        return None  # Keras's Dot.compute_mask: None
    if merge:
        keeps = incoming and (len(incoming) == len(tensors) or type(layer).__name__ == "Concatenate")
        return incoming[0] if keeps else None
    if incoming and getattr(layer, "_would_read_mask", False):
        layer._reads_mask_in_graph = True
    return mask_after(layer, incoming[0] if incoming else None)


def replay(inputs, nodes, outputs):
    """The KerasTensors of a built model's graph, for model.inputs/outputs and layer.input/output:
    `inputs` as (shape, dtype, name) without the batch axis, `nodes` as (layer, value numbers) in
    graph order (values 0..len(inputs)-1 are the inputs), `outputs` value numbers. Returns
    (input tensors, output tensors). A layer keeps the output of the call that made it, if any
    (its functional model's), else gets this graph's."""
    values = [KerasTensor((None, *shape), dtype, name=name) for shape, dtype, name in inputs]
    for layer, ids in nodes:
        tensors = [values[i] for i in ids]
        node = _Node(layer, tensors, replayed=True)
        node.output = KerasTensor(layer.output_shape, "float32", node=node, name=layer.name)
        node.output._mask_source = _mask_source_after(layer, tensors, getattr(layer, "_merge", False))
        existing = getattr(layer, "_output_node", None)
        if existing is None or existing.replayed:
            layer._output_node = node
        values.append(node.output)
    return [values[i] for i in range(len(inputs))], [values[i] for i in outputs]


def as_tensor_list(value, what):
    """inputs/outputs of keras.Model: one KerasTensor or a list/tuple of them (dicts are not supported)."""
    if isinstance(value, dict):
        raise NotImplementedError(f"keras.Model: {what} given as a dict are not supported; pass a list")
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ValueError(f"keras.Model: {what} must not be empty")
    for t in items:
        if not isinstance(t, KerasTensor):
            raise TypeError(f"keras.Model: {what} must be KerasTensors (keras.Input(...) or layer outputs), got "
                            f"{type(t).__name__} {t!r}")
    return items


def collect_graph(inputs, outputs, model_name):
    """The nodes between `inputs` and `outputs` in topological order: [(layer, [value numbers])] where
    values 0..len(inputs)-1 are the inputs and node i makes value len(inputs) + i (a layer called
    several times has a node per call); and the outputs' value numbers. ValueError when an output
    depends on a tensor that is not among the inputs."""
    for t in inputs:
        if t._node is not None:
            raise ValueError(f"keras.Model '{model_name}': inputs must be keras.Input tensors, but {t!r} is a layer "
                             "output")
    value_of = {id(t): k for k, t in enumerate(inputs)}
    order, seen, visited = [], set(), []

    def visit(t, path):
        if id(t) in value_of:
            return
        node = t._node
        if node is None:
            raise ValueError(f"keras.Model '{model_name}': graph disconnected: the outputs depend on input "
                             f"'{t.name}' {t.shape}, which is not in the model's inputs (reached through layers "
                             f"{' <- '.join(path) or '(an output)'}); the inputs given are "
                             f"{[i.name for i in inputs]}")
        if id(node) in seen:
            return
        seen.add(id(node))
        for parent in node.inputs:
            visit(parent, path + [node.layer.name])
        value_of[id(node.output)] = len(inputs) + len(order)
        order.append(node)
        visited.append(node.layer.name)

    for out in outputs:
        visit(out, [])
    nodes = [(n.layer, [value_of[id(t)] for t in n.inputs]) for n in order]
    return nodes, [value_of[id(t)] for t in outputs]
