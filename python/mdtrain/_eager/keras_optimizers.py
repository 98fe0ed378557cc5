"""Keras optimizers on variables: apply_gradients runs the C++ optimizer's update in place on a
model's weights (ModelWeight views) or on tf.Variables. With the same gradients, it is the update
fit makes."""
import warnings

import numpy as np

from mdtrain import _core
from mdtrain._eager.tensor import convert_to_tensor
from mdtrain._eager.variables import ModelWeight, Variable


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
        _check_not_compiled_under_replicas(optimizer)
        # One update from the sum of all replicas' gradients (replica_gradients.py).
        arrays = [(_gradient_array(g, v), v) for g, v in kept]
        distribute._replica_gradients().add(optimizer, context.replica_id_in_sync_group, arrays,
                                            lambda summed: _apply(optimizer, summed))
        return optimizer.iterations
    _check_not_compiled_under_replicas(optimizer)
    _apply(optimizer, kept)
    return optimizer.iterations


def _check_not_compiled_under_replicas(optimizer):
    model_core = optimizer._model_core
    if model_core is not None and model_core.strategy is not None and model_core.strategy.num_replicas_in_sync > 1:
        # Each replica of such a model holds its own optimizer state, which fit steps together.
        raise NotImplementedError("apply_gradients: the optimizer belongs to a model compiled under a strategy with "
                                  "several replicas (each replica holds its own optimizer state); in a custom loop "
                                  "use an optimizer the model was not compiled with, or model.train_step((x, y)) "
                                  "inside strategy.run")


def _gradient_array(g, v):
    """A replica's gradient for `v`, checked, as an array of the variable's dtype."""
    g = g._snapshot() if isinstance(g, Variable) else convert_to_tensor(g)
    if g.shape != v.shape:
        raise ValueError(f"apply_gradients: the gradient for variable '{v.path}' has shape {g.shape}, but the "
                         f"variable has shape {v.shape}")
    if not v.dtype.is_floating:
        raise TypeError(f"apply_gradients: variable '{v.path}' has dtype {v.dtype.name}; only float32 and "
                        "float64 variables can be trained")
    return np.asarray(g._value, dtype=v.dtype.as_numpy_dtype)


def _apply(optimizer, kept):
    """One C++ optimizer step over the (gradient, variable) pairs."""
    variables = [v for _, v in kept]
    core = optimizer._live()
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
