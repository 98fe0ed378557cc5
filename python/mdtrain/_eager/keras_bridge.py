"""Keras layers, models, losses and optimizers on eager tensors and GradientTape.

A layer call runs the C++ layer's forward and records one tape node whose backward runs the C++
layer's backward; a Sequential call is its layers' calls in turn, so the gradients a tape gives
for a model are computed by the very backward code fit runs, in the same order. A layer's
backward needs the buffers of its own forward, and a layer keeps only those of its last one:
when the tape reaches a call that is not the layer's last (a model called twice on one tape), it
runs that call's forward again first (same input, same training flag and step, so the same
dropout mask; non-trainable weights such as BatchNormalization's moving statistics are put back
afterwards, so they are not updated twice). Re-running costs one forward and keeps no copies.

Weights are ModelWeight variables (views of the C++ weights). optimizer.apply_gradients runs the
C++ optimizer's update in place on them: with the same gradients, the same update fit makes.
"""
import contextlib
import json
import sys
import warnings

import numpy as np

from mdtrain import _core
from mdtrain._eager import dtypes
from mdtrain._eager import ops
from mdtrain._eager import tape as _tape
from mdtrain._eager.tensor import convert_to_tensor, is_tensor_like, wrap
from mdtrain._eager.variables import ModelWeight, Variable


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


def _run_layer(layer, x, training, step, model=None):
    core = layer._core
    weights = _trainable_variables(layer)
    for w in weights:
        _tape.variable_accessed(w)
    tapes = _tape.recording_tapes([x] + weights)
    x_array = np.ascontiguousarray(x._value, dtype=np.float32)
    y_array, logits_array = _core.tape_layer_forward(core, x_array, training, step)
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

        _core.tape_build_layer(layer._core, list(x.shape[1:]), _random.draw_seed())
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
    training = bool(training)
    x = _as_input(inputs)
    if x.ndim < 1:
        raise ValueError(f"Model '{model.name}' needs inputs with a batch axis, got a scalar")
    with _holding(model, "__call__"):
        # Checks the input shape (Keras's messages) and builds the model on the first call.
        model._prepare_x(np.zeros((0,) + tuple(x.shape[1:]), dtype=np.float32), "__call__")
        model._core.refresh_weights()
        step = model.__dict__.get("_tape_training_calls", 0)
        h = x
        for layer in model._layers:
            h = _run_layer(layer, h, training, step, model)
    if training:
        model._tape_training_calls = step + 1
    return h


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


# ---- losses ---------------------------------------------------------------------------------------

def _logits_loss(loss, activation):
    cache = loss.__dict__.setdefault("_tape_logits_losses", {})
    if activation not in cache:
        cache[activation] = _core.tape_logits_loss(loss._core, activation)
    return cache[activation]


def call_loss(loss, y_true, y_pred, sample_weight=None):
    """A Keras loss on tensors: per-example values (reduction None), their sum or their mean, as a
    tensor differentiable with respect to y_pred. When y_pred is the output of a softmax or sigmoid
    layer, the loss is computed from that layer's logits, as Keras and fit do."""
    from mdtrain.keras.losses import _labels

    reduction = getattr(loss, "reduction", "sum_over_batch_size")
    pred = convert_to_tensor(y_pred)
    if not pred.dtype.is_floating:
        pred = ops.cast(pred, dtypes.float32)
    labels = _labels(np.asarray(y_true))
    core, target = loss._core, pred
    if pred._keras_logits is not None:
        logits, activation = pred._keras_logits
        logits_core = _logits_loss(loss, activation)
        if logits_core is not None:
            core, target = logits_core, logits
    if sample_weight is None:
        return _loss_node(core, labels, target, reduction, loss)
    per_example = _loss_node(core, labels, target, None, loss)
    weights = ops.cast(convert_to_tensor(sample_weight), per_example.dtype)
    if weights.ndim > per_example.ndim:
        weights = ops.reshape(weights, per_example.shape)
    weighted = ops.multiply(per_example, weights)
    if reduction is None:
        return weighted
    total = ops.reduce_sum(weighted)
    if reduction == "sum":
        return total
    return ops.realdiv(total, max(int(np.prod(per_example.shape.as_list(), dtype=np.int64)), 1))


def _loss_node(core, labels, target, reduction, loss):
    array = np.ascontiguousarray(target._value)
    dtype = array.dtype
    if reduction is None:
        value = np.asarray(core.per_sample(labels, array), dtype=dtype)
    elif reduction == "sum":
        value = np.asarray(core.sum(labels, array), dtype=dtype)
    else:
        value = np.asarray(core(labels, array), dtype=dtype)
    out = wrap(value)
    tapes = _tape.recording_tapes([target])
    if not tapes:
        return out
    count = _core.tape_loss_sample_count(core, labels, array) if reduction == "sum_over_batch_size" else None
    name = f"{type(loss).__name__}"

    def backward(grads):
        g = grads[0]._value
        if reduction is None:
            flat = g.reshape(-1)
            if flat.size and np.all(flat == flat[0]):
                _, d = core.gradient(labels, array, float(flat[0]))
            else:
                _, d = core.gradient(labels, array, 1.0)
                d = d * g[..., None]
        elif reduction == "sum":
            _, d = core.gradient(labels, array, float(g))
        else:
            # fit's scale exactly (1 / batch) when the upstream gradient is 1.
            scale = 1.0 / count if count > 0 else 0.0
            if float(g) != 1.0:
                scale *= float(g)
            _, d = core.gradient(labels, array, scale)
        result = wrap(np.asarray(d, dtype=dtype))
        _tape.record_opaque(name, [grads[0], target], [result])
        return [result]

    _tape.record(tapes, name, [target], [out], backward)
    return out


# ---- optimizers -------------------------------------------------------------------------------------

def apply_gradients(optimizer, grads_and_vars):
    """Keras's optimizer.apply_gradients: one step of the C++ optimizer over these variables."""
    pairs = list(grads_and_vars)
    for g, v in pairs:
        if not isinstance(v, Variable):
            raise TypeError(f"apply_gradients: expected tf.Variable objects, got {v!r} of type {type(v).__name__}")
    kept = [(g, v) for g, v in pairs if g is not None]
    if pairs and not kept:
        raise ValueError(f"No gradients provided for any variable: {[v.path for _, v in pairs]}.")
    if len(kept) < len(pairs):
        missing = [v.path for g, v in pairs if g is None]
        warnings.warn(f"Gradients do not exist for variables {missing} when minimizing the loss. If using "
                      "`model.compile()`, did you forget to provide a `loss` argument?", UserWarning, stacklevel=3)
    if not kept:
        return optimizer.iterations
    variables = [v for _, v in kept]
    ids = [v._id for v in variables]
    known = optimizer.__dict__.get("_tape_variable_ids")
    if known is None:
        optimizer._tape_variable_ids = ids
    elif known != ids:
        raise ValueError(f"apply_gradients: {type(optimizer).__name__} was first applied to {len(known)} variables "
                         f"and is now given {len(ids)} others (or in another order). An optimizer updates one "
                         "fixed list of variables; create another optimizer for another list.")
    from mdtrain import distribute

    context = distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        # Each replica would apply its own gradients: several steps where TF takes one.
        raise NotImplementedError(f"apply_gradients inside strategy.run with {context.num_replicas_in_sync} replicas "
                                  "is not supported yet (the tape is not wired to strategies); call "
                                  "model.train_step((x, y)) inside strategy.run instead (docs/strategies.md)")
    core = optimizer._live()
    model_core = optimizer._model_core
    if model_core is not None and model_core.strategy is not None and model_core.strategy.num_replicas_in_sync > 1:
        raise NotImplementedError("apply_gradients: the optimizer belongs to a model compiled under a strategy with "
                                  "several replicas; custom loops under strategies are not supported yet")
    values, grads, commits, names = [], [], [], []
    for g, v in kept:
        g = g._snapshot() if isinstance(g, Variable) else convert_to_tensor(g)
        if g.shape != v.shape:
            raise ValueError(f"apply_gradients: the gradient for variable '{v.path}' has shape {g.shape}, but the "
                             f"variable has shape {v.shape}")
        if not v.dtype.is_floating:
            raise TypeError(f"apply_gradients: variable '{v.path}' has dtype {v.dtype.name}; only float32 and "
                            "float64 variables can be trained")
        storage, commit = v._update_storage()
        values.append(storage)
        grads.append(np.asarray(g._value, dtype=storage.dtype, order="C"))  # keeps 0-d arrays 0-d
        commits.append(commit)
        names.append(v.path)
    _core.tape_optimizer_apply(core, values, grads, names)
    synced = set()  # a model's replicas take its new weights once
    for commit, v in zip(commits, variables):
        if isinstance(v, ModelWeight):
            model = v._layer._owner()
            key = id(model) if model is not None else id(v)
            if key in synced:
                continue
            synced.add(key)
        commit()
    return optimizer.iterations


def is_eager_value(value):
    return is_tensor_like(value)
