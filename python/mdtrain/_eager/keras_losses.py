"""Keras losses on eager tensors: per-example values, sums or means as tensors, differentiable
with respect to y_pred by GradientTape, computed (value and gradient) by the C++ loss fit uses."""
import numpy as np

from mdtrain import _core
from mdtrain._eager import dtypes, ops
from mdtrain._eager import tape as _tape
from mdtrain._eager.tensor import convert_to_tensor, is_tensor_like, wrap


def is_eager_value(value):
    """Whether a loss or metric argument is a tensor or variable (the eager path)."""
    return is_tensor_like(value)


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
    mask = getattr(pred, "_keras_mask", None)
    if sample_weight is None and mask is None:
        return _loss_node(core, labels, target, reduction, loss)
    per_example = _loss_node(core, labels, target, None, loss)
    if mask is not None:
        sample_weight = _mask_weights(mask, per_example, reduction, sample_weight, loss)
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


def _mask_weights(mask, per_example, reduction, sample_weight, loss):
    """Keras's apply_mask: a masked step weighs 0; for a mean, a kept one total / valid, so that the
    mean over all steps is the sum over the kept ones / their count (fit's arithmetic, docs/
    losses_and_metrics.md), and a batch with every step masked has loss 0."""
    shape = tuple(per_example.shape.as_list())
    if mask.shape != shape:
        raise ValueError(f"{type(loss).__name__}: y_pred carries a mask of shape {mask.shape}, but the loss has "
                         f"one value per {shape} steps")
    weights = mask.astype(np.float64)
    if reduction in ("sum_over_batch_size", "mean"):
        weights = weights * (weights.size / (weights.sum() + 1e-7))
    weights = weights.astype(np.float32)
    if sample_weight is None:
        return weights
    sample = np.asarray(sample_weight, dtype=np.float32)
    return weights * sample.reshape(sample.shape + (1,) * (weights.ndim - sample.ndim))


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
