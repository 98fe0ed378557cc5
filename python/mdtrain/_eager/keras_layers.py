"""Keras layers and models on eager tensors and GradientTape.

A layer call runs the C++ layer's forward and records one tape node whose backward runs the C++
layer's backward; a Sequential call is its layers' calls in turn, so the gradients a tape gives
for a model are computed by the very backward code fit runs, in the same order. A layer's
backward needs the buffers of its own forward, and a layer keeps only those of its last one:
when the tape reaches a call that is not the layer's last (a model called twice on one tape), it
runs that call's forward again first (same input, same training flag and step, so the same
dropout mask; non-trainable weights such as BatchNormalization's moving statistics are put back
afterwards, so they are not updated twice). Re-running costs one forward and keeps no copies.

Weights are ModelWeight variables (views of the C++ weights); layer.losses are the weight
penalties, differentiable on the tape.
"""
import contextlib
import json
import sys

import numpy as np

from mdtrain import _core
from mdtrain._eager import dtypes, ops
from mdtrain._eager import tape as _tape
from mdtrain._eager.tensor import convert_to_tensor, wrap
from mdtrain._eager.variables import ModelWeight


# ---- variables of layers -----------------------------------------------------------------------

def layer_variables(layer):
    """Every weight of a layer as a variable, in get_weights() order (the same objects each time)."""
    core = layer._core
    if core is None or not core.built:
        return []
    cached = layer.__dict__.get("_tape_variables")
    if cached is None:
        names, trainable = core.weight_names(), core.weight_trainable()
        cached = [ModelWeight(layer, i, names[i], trainable[i]) for i in range(len(names))]
        layer._tape_variables = cached
    return list(cached)


def _trainable_variables(layer):
    return [v for v in layer_variables(layer) if v.trainable]


# ---- layer and model calls -----------------------------------------------------------------------

def _as_input(inputs):
    """Layers compute in float32: floating and integer inputs are cast (Keras's autocast)."""
    x = convert_to_tensor(inputs)
    if x.dtype != dtypes.float32:
        if not (x.dtype.is_floating or x.dtype.is_integer or x.dtype.is_bool):
            raise TypeError(f"Layers take numeric inputs, got a tensor of dtype {x.dtype.name}")
        x = ops.cast(x, dtypes.float32)
    return x


@contextlib.contextmanager
def _holding(model, what):
    if model is None:
        yield
        return
    if not model._busy.acquire(blocking=False):
        raise RuntimeError(f"{what}: model '{model.name}' is busy: another thread is running fit/evaluate/predict/"
                           "train_on_batch on it.")
    try:
        yield
    finally:
        model._busy.release()


def _activation_backward(activation, y, gy):
    """dL/d(logits) from dL/dy for the output activations that have logits (softmax, sigmoid)."""
    if activation == "softmax":
        return y * (gy - np.sum(gy * y, axis=-1, keepdims=True))
    return y * (1 - y) * gy


def _run_layer(layer, x, training, step, model=None, mask=None):
    """The layer on x; `mask`: the (batch, timesteps) float32 mask x carries (None: none), as
    nn/layer_stack.cpp passes it. The output's mask is left in layer._eager_output_mask."""
    core = layer._core
    _core.tape_layer_set_input_mask(core, mask)
    weights = _trainable_variables(layer)
    for w in weights:
        _tape.variable_accessed(w)
    tapes = _tape.recording_tapes([x] + weights)
    x_array = np.ascontiguousarray(x._value, dtype=np.float32)
    y_array, logits_array = _core.tape_layer_forward(core, x_array, training, step)
    layer._eager_output_mask = _core.tape_layer_output_mask(core, mask)
    y = wrap(y_array)
    logits = None
    activation = None
    if logits_array is not None:
        logits = wrap(logits_array)
        activation = _core.tape_layer_activation(core)
        y._keras_logits = (logits, activation)
    if not tapes:
        return y
    serial = layer.__dict__.get("_tape_serial", 0) + 1
    layer._tape_serial = serial
    need_dx = any(x._id in t._tracked for t in tapes)
    name = f"{type(layer).__name__}({layer.name})"

    def backward(grads):
        gy, glogits = grads[0], grads[1] if len(grads) > 1 else None
        with _holding(model, "gradient"):
            if layer.__dict__.get("_tape_serial") != serial:
                # Not the layer's last forward: restore this call's buffers (see the module doc).
                _core.tape_layer_set_input_mask(core, mask)
                _core.tape_layer_forward(core, x_array, training, step, 0, True)
                layer._tape_serial = serial
            if glogits is None:
                g, from_logits = gy._value, False
            elif gy is None:
                g, from_logits = glogits._value, True
            else:
                g = glogits._value + _activation_backward(activation, y._value, gy._value)
                from_logits = True
            dx, weight_grads = _core.tape_layer_backward(core, np.ascontiguousarray(g, dtype=np.float32),
                                                           from_logits, need_dx)
        results = [wrap(dx) if dx is not None else None] + _gradient_arrays(layer, weight_grads[:len(weights)])
        _tape.record_opaque(name, [t for t in (gy, glogits, x) if t is not None] + weights,
                            [r for r in results if r is not None])
        return results

    _tape.record(tapes, name, [x] + weights, [y] if logits is None else [y, logits], backward)
    return y


def _gradient_arrays(layer, views):
    """Tensors holding copies of a layer's weight gradients (`views` are the layer's own buffers,
    which its next backward overwrites). A copy goes into an array an earlier backward returned
    once nothing references it any more: writing fresh memory costs page faults, about as much
    as the backward itself. A loop holds the previous step's gradients while it computes the
    next ones, so a few arrays per weight take turns."""
    pool = layer.__dict__.setdefault("_tape_gradient_pool", {})
    out = []
    for k, view in enumerate(views):
        buffers = pool.setdefault(k, [])
        target = None
        for buffer in buffers:
            # References: the list's, the loop variable's and getrefcount's argument: no one else's.
            if buffer.shape == view.shape and sys.getrefcount(buffer) == 3:
                target = buffer
                break
        if target is None:
            target = view.copy()
            if len(buffers) < _GRADIENT_BUFFERS:
                buffers.append(target)
        else:
            target.flags.writeable = True
            np.copyto(target, view)
        out.append(wrap(target))
    return out


_GRADIENT_BUFFERS = 3


def call_layer(layer, inputs, training=None):
    """layer(inputs, training=...): a built layer (or one built here for these inputs) on a tensor."""
    x = _as_input(inputs)
    model = layer._owner()
    if not layer._core.built:
        if model is not None:
            raise ValueError(f"Layer '{layer.name}' belongs to model '{model.name}', which is not built yet: build "
                             "or call the model first.")
        if x.ndim < 1:
            raise ValueError(f"Layer '{layer.name}' needs inputs with a batch axis, got a scalar")
        from mdtrain import _random

        def build(seed):
            _core.tape_build_layer(layer._core, list(x.shape[1:]), seed)
            return bool(layer._core.weight_names())  # a layer without weights keeps the seed undrawn

        _random.build_with_seed(build)
    training = bool(training)
    step = layer.__dict__.get("_tape_training_calls", 0)
    with _holding(model, f"layer '{layer.name}'"):
        if model is not None:
            model._core.refresh_weights()
        y = _run_layer(layer, x, training, step, model)
    if training:
        layer._tape_training_calls = step + 1
    return y


def call_model(model, inputs, training=None):
    """model(inputs, training=...) on eager tensors: the layers run one by one on the host copy of
    the weights (recorded by the tapes that watch the input or the weights). Always this path, not
    predict's, so that the output carries its logits for a loss, as inside a tape."""
    if model._graph is not None or model._core is None:
        return _call_graph(model, inputs, training)
    training = bool(training)
    x = _as_input(inputs)
    if x.ndim < 1:
        raise ValueError(f"Model '{model.name}' needs inputs with a batch axis, got a scalar")
    with _holding(model, "__call__"):
        # Checks the input shape (Keras's messages) and builds the model on the first call.
        model._prepare_x(np.zeros((0,) + tuple(x.shape[1:]), dtype=np.float32), "__call__")
        model._core.refresh_weights()
        step = model.__dict__.get("_tape_training_calls", 0)
        h, mask = x, None
        for layer in model._layers:
            h = _run_layer(layer, h, training, step, model, mask)
            mask = layer._eager_output_mask
    if training:
        model._tape_training_calls = step + 1
    return _with_mask(h, mask)


def _with_mask(output, mask):
    """The model's output carrying its mask for a loss called on it (keras_losses.call_loss)."""
    if mask is not None:
        output._keras_mask = np.asarray(mask, dtype=np.float32)
    return output


def _call_graph(model, inputs, training):
    """model(inputs) for a functional or subclassed model: its graph's nodes in order, each a layer
    call as above (merge layers as eager ops), so GradientTape sees the same graph fit trains. A
    subclassed model is traced on the first call (its call() becomes the graph)."""
    training = bool(training)
    if model._graph is not None:
        several = len(model._graph.input_shapes) > 1
    else:  # not traced yet: a list of arrays or tensors is one per input
        several = isinstance(inputs, (list, tuple)) and len(inputs) > 1 and all(hasattr(a, "shape") for a in inputs)
    if several and (not isinstance(inputs, (list, tuple)) or len(inputs) != len(model._graph.input_shapes
                                                                              if model._graph else inputs)):
        raise ValueError(f"Model '{model.name}' has {len(model._graph.input_shapes)} inputs; call it on a list of "
                         f"{len(model._graph.input_shapes)} tensors")
    xs = [_as_input(x) for x in (inputs if several else [inputs])]
    for x in xs:
        if x.ndim < 1:
            raise ValueError(f"Model '{model.name}' needs inputs with a batch axis, got a scalar")
    with _holding(model, "__call__"):
        if model._core is None:
            model.build([(None, *x.shape[1:]) for x in xs] if several else (None, *xs[0].shape[1:]))
        graph = model._graph
        if len(xs) != len(graph.input_shapes):
            raise ValueError(f"Model '{model.name}' has {len(graph.input_shapes)} inputs, got {len(xs)}")
        for k, (x, shape) in enumerate(zip(xs, graph.input_shapes)):
            if tuple(x.shape[1:]) != shape:
                raise ValueError(f"Input {k} of model '{model.name}' is incompatible: expected shape "
                                 f"{(None, *shape)}, found shape {tuple(x.shape)}")
        model._core.refresh_weights()
        step = model.__dict__.get("_tape_training_calls", 0)
        values, masks = list(xs), [None] * len(xs)
        for layer, ids in graph.nodes:
            if getattr(layer, "_merge", False):
                masked = [i for i in ids if masks[i] is not None]
                if masked:
                    # fit's graph runner (nn/layer_graph.cpp) merges masks; this path does not yet,
                    # and dropping them would run the padding through the next recurrent layer.
                    raise NotImplementedError(f'{type(layer).__name__} layer "{layer.name}" merges masked inputs; '
                                              "calling a functional model with masked merges directly (model(x), "
                                              "GradientTape) is not supported yet: fit, evaluate and predict are")
                values.append(layer._eager([values[i] for i in ids]))
                masks.append(None)
            else:
                values.append(_run_layer(layer, values[ids[0]], training, step, model, masks[ids[0]]))
                masks.append(layer._eager_output_mask)
    if training:
        model._tape_training_calls = step + 1
    outs = [_with_mask(values[i], masks[i]) for i in graph.outputs]
    return outs[0] if graph.single_output else outs


# ---- regularization losses ------------------------------------------------------------------------

def _has_regularizer(layer):
    cached = layer.__dict__.get("_tape_regularized")
    if cached is None:
        config = json.loads(layer._core.config_json())
        cached = any(k.endswith("_regularizer") and v is not None for k, v in config.items())
        layer._tape_regularized = cached
    return cached


def layer_losses(layer):
    """The layer's weight penalty as a list of one scalar tensor (empty without regularizers),
    differentiable with respect to its weights."""
    if layer._core is None or not layer._core.built or not _has_regularizer(layer):
        return []
    model = layer._owner()
    if model is not None:
        model._core.refresh_weights()
    weights = _trainable_variables(layer)
    for w in weights:
        _tape.variable_accessed(w)
    value, grads = _core.tape_layer_regularization(layer._core)
    out = wrap(np.asarray(value, dtype=np.float32))
    tapes = _tape.recording_tapes(weights)
    if tapes:
        grad_tensors = [wrap(g) for g in grads[:len(weights)]]
        name = f"Regularizer({layer.name})"

        def backward(out_grads):
            _tape.record_opaque(name, weights, grad_tensors)
            return [ops.multiply(out_grads[0], g) for g in grad_tensors]

        _tape.record(tapes, name, weights, [out], backward)
    return [out]
