"""tf.nn: softmax, crossentropies and the loss scaling of custom training loops.

See ops.py for the conventions (dtypes, errors, recording on tapes)."""
import numpy as np

from mdtrain._eager import dtypes
from mdtrain._eager.tensor import convert_to_tensor, is_tensor_like, wrap
from mdtrain._eager.op_support import _dims, _invalid, _record, _require_float, _tensor
from mdtrain._eager.math_ops import (abs, add, add_n, cast, exp, log1p, multiply, negative, realdiv, reduce_sum,
                                     relu, square, subtract)
from mdtrain._eager.array_ops import expand_dims, where, zeros_like


# ---- tf.nn ------------------------------------------------------------------------------------

def _log_softmax_array(a, axis):
    top = np.max(a, axis=axis, keepdims=True)
    shifted = a - np.where(np.isfinite(top), top, 0)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def softmax(logits, axis=None, name=None):
    """exp(logits) normalized along `axis` (the last by default)."""
    x = _tensor(logits)
    _require_float(x, "Softmax")
    axis = -1 if axis is None else int(axis)
    with np.errstate(all="ignore"):
        out = wrap(np.exp(_log_softmax_array(x._value, axis)).astype(x._value.dtype))

    def backward(grads):
        g = grads[0]
        return [multiply(subtract(g, reduce_sum(multiply(g, out), axis=axis, keepdims=True)), out)]

    _record("Softmax", (x,), (out,), backward)
    return out


def log_softmax(logits, axis=None, name=None):
    x = _tensor(logits)
    _require_float(x, "LogSoftmax")
    axis = -1 if axis is None else int(axis)
    with np.errstate(all="ignore"):
        out = wrap(_log_softmax_array(x._value, axis).astype(x._value.dtype))

    def backward(grads):
        g = grads[0]
        return [subtract(g, multiply(exp(out), reduce_sum(g, axis=axis, keepdims=True)))]

    _record("LogSoftmax", (x,), (out,), backward)
    return out


def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """Per example -log(softmax(logits)[label]); labels are class ids shaped logits.shape[:-1]."""
    op = "SparseSoftmaxCrossEntropyWithLogits"
    if labels is None or logits is None:
        raise ValueError("sparse_softmax_cross_entropy_with_logits: pass labels= and logits=")
    x = _tensor(logits)
    _require_float(x, op)
    y = np.asarray(_tensor(labels)._value)
    if y.dtype.kind not in "iu":
        raise TypeError(f"{op}: labels must be int32 or int64 class ids, got {y.dtype}")
    if x.ndim < 1 or y.shape != x._value.shape[:-1]:
        raise _invalid(f"logits and labels must have the same first dimension, got logits shape "
                       f"{_dims(x._value.shape)} and labels shape {_dims(y.shape)}", op)
    classes = x._value.shape[-1]
    bad = (y < 0) | (y >= classes)
    if bad.any():
        raise _invalid(f"Received a label value of {y[bad].reshape(-1)[0]} which is outside the valid range of "
                       f"[0, {classes}).  Label values: {' '.join(str(v) for v in y.reshape(-1))}", op)
    with np.errstate(all="ignore"):
        logp = _log_softmax_array(x._value, -1)
        value = -np.take_along_axis(logp, y[..., None].astype(np.int64), axis=-1)[..., 0]
    out = wrap(np.asarray(value, dtype=x._value.dtype))
    onehot = (y[..., None] == np.arange(classes)).astype(x._value.dtype)

    def backward(grads):
        return [multiply(expand_dims(grads[0], -1), subtract(softmax(x), onehot))]

    _record(op, (x,), (out,), backward)
    return out


def softmax_cross_entropy_with_logits(labels, logits, axis=-1, name=None):
    """Per example -sum(labels * log_softmax(logits)) along `axis`."""
    x = _tensor(logits)
    t = convert_to_tensor(labels, dtype=x.dtype) if not is_tensor_like(labels) else _tensor(labels)
    if t._value.shape != x._value.shape:
        raise _invalid(f"logits and labels must be broadcastable: logits_size={_dims(x._value.shape)} "
                       f"labels_size={_dims(t._value.shape)}", "SoftmaxCrossEntropyWithLogits")
    return negative(reduce_sum(multiply(t, log_softmax(x, axis=axis)), axis=axis))


def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """max(x, 0) - x * z + log(1 + exp(-|x|)) per element (x logits, z labels)."""
    x = _tensor(logits)
    z = convert_to_tensor(labels, dtype=x.dtype) if not is_tensor_like(labels) else _tensor(labels)
    if z._value.shape != x._value.shape:
        raise ValueError(f"logits and labels must have the same shape ({x.shape} vs {z.shape})")
    return add(subtract(relu(x), multiply(x, z)), log1p(exp(negative(abs(x)))))


def l2_loss(t, name=None):
    return realdiv(reduce_sum(square(t)), 2)


def bias_add(value, bias, data_format=None, name=None):
    return add(value, bias)


def _num_replicas_in_sync(where):
    from mdtrain import distribute

    context = distribute.get_replica_context()
    if context is not None:
        return context.num_replicas_in_sync
    if distribute._current_scope() is not None:
        raise RuntimeError(f"You are calling `{where}` in cross replica context, while it was expected to be called "
                           "in replica context.")
    return 1


def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None, name=None):
    """sum(per_example_loss * sample_weight) / global_batch_size; the global batch defaults to this
    replica's batch times the replicas in sync (tf.nn.compute_average_loss)."""
    losses = _tensor(per_example_loss)
    if not losses.dtype.is_floating:
        losses = cast(losses, dtypes.float32)
    if sample_weight is not None:
        weights = _tensor(sample_weight)
        losses = multiply(losses, cast(weights, losses.dtype))
    if global_batch_size is None:
        per_replica = losses._value.shape[0] if losses.ndim else 1
        global_batch_size = per_replica * _num_replicas_in_sync("compute_average_loss")
    else:
        if is_tensor_like(global_batch_size):
            global_batch_size = np.asarray(global_batch_size).item()
        if isinstance(global_batch_size, float) or (isinstance(global_batch_size, np.generic) and
                                                    np.asarray(global_batch_size).dtype.kind == "f"):
            raise TypeError(f"global_batch_size must be an integer, got {global_batch_size!r}")
        if global_batch_size < 0:
            raise ValueError(f"global_batch_size must be non-negative, got {global_batch_size}")
    total = reduce_sum(losses)
    if global_batch_size == 0:
        return zeros_like(total)
    return realdiv(total, global_batch_size)


def scale_regularization_loss(regularization_loss, name=None):
    """The (summed) regularization loss divided by the replicas in sync."""
    if isinstance(regularization_loss, (list, tuple)):
        regularization_loss = add_n(regularization_loss)
    loss = _tensor(regularization_loss)
    return realdiv(loss, _num_replicas_in_sync("scale_regularization_loss"))
