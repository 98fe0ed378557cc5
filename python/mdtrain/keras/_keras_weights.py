"""A Sequential model's weights and optimizer state in Keras 3's HDF5 layout (model.weights.h5).

Keras 3 stores one group per object: /vars (the model's, empty), /layers/<key>/vars/<i> holding
a layer's variables in layer.weights order, where the key is the snake-case class name counted
per model (dense, dense_1, conv2d, ...), not the layer's name, and /optimizer/vars/<i> holding the
optimizer's variables: iterations (int64), learning_rate (float32; absent when it is a schedule),
then the slots. Keras orders the slots by slot kind and, within a kind, by trainable variable,
except Adam and AdamW which create (momentum, velocity) together per variable. mdtrain's own
optimizer state is ordered by kind throughout and names every slot "<weight name>/<kind>" (a
weight name being "<layer>/<weight>");
the two orders are mapped here.
"""
import re
import warnings

import numpy as np

from mdtrain import _safe_hdf5
from mdtrain.keras.optimizers import LearningRateSchedule

_PAIRED = ("Adam", "AdamW")  # Keras creates momentum and velocity per variable, side by side


_h5py = _safe_hdf5.h5py  # for writing; reading goes through _safe_hdf5.File


def slot_kinds(optimizer):
    """The optimizer's slot kinds in mdtrain's (and Keras's) creation order."""
    name, config = type(optimizer).__name__, optimizer.get_config()
    if name == "SGD":
        return ["momentum"] if config.get("momentum") else []
    if name in _PAIRED:
        return ["momentum", "velocity"] + (["velocity_hat"] if config.get("amsgrad") else [])
    if name == "RMSprop":
        return (["velocity"] + (["momentum"] if config.get("momentum") else [])
                + (["average_gradient"] if config.get("centered") else []))
    if name == "Adagrad":
        return ["accumulator"]
    raise ValueError(f"optimizer {name} has no known Keras variable layout")


def _trainable_names(model):
    return [w for layer in model._layers
            for w, t in zip(layer._core.weight_names(), layer._core.weight_trainable()) if t]


def _keras_slot_order(model):
    """mdtrain slot names ("<layer>/<weight>/<kind>") in Keras's order."""
    kinds, names = slot_kinds(model.optimizer), _trainable_names(model)
    order = []
    if type(model.optimizer).__name__ in _PAIRED:
        order += [f"{n}/{k}" for n in names for k in kinds[:2]]
        kinds = kinds[2:]
    order += [f"{n}/{k}" for k in kinds for n in names]
    return order


def optimizer_to_keras(model):
    """The optimizer's variables as Keras 3 lists them."""
    state = dict(model._core.optimizer_state())
    out = [np.asarray(state.pop("iterations", 0), dtype=np.int64)]
    if not isinstance(model.optimizer._learning_rate, LearningRateSchedule):
        out.append(np.asarray(model.optimizer.learning_rate.numpy(), dtype=np.float32))
    order = _keras_slot_order(model)
    shapes = {n: w.shape for layer in model._layers
              for n, w in zip(layer._core.weight_names(), layer.get_weights())}
    for name in order:  # slots not created yet (never trained): zeros, as Keras builds them
        value = state.get(name)
        out.append(np.asarray(value, np.float32) if value is not None else
                   np.zeros(shapes[name.rsplit("/", 1)[0]], np.float32))
    return out


def _check_optimizer_scalars(model, values, path, where):
    """The iterations and, without a schedule, the learning rate of Keras's optimizer variable
    list: each one finite number >= 0 (what the optimizer would refuse later), named by file."""
    checked = [("iterations", "one count >= 0")]
    if not isinstance(model.optimizer._learning_rate, LearningRateSchedule) and len(values) > 1 \
            and values[1] is not None:
        checked.append(("learning rate", "one finite number >= 0"))
    for value, (what, rule) in zip(values, checked):
        value = np.asarray(value)
        if value.size != 1 or not np.isfinite(value).all() or value.reshape(-1)[0] < 0:
            raise ValueError(f"{where}: the optimizer's {what} in {path} must be {rule}, got "
                             f"{value.reshape(-1)[:4].tolist()}")


def optimizer_from_keras(model, values, where):
    """Sets the compiled model's optimizer state from Keras's variable list."""
    order = _keras_slot_order(model)
    schedule = isinstance(model.optimizer._learning_rate, LearningRateSchedule)
    scalars = 1 if schedule else 2
    expected = scalars + len(order)
    if len(values) != expected:
        if len(values) == scalars:  # saved before its first step: Keras had not made the slots yet
            order = []
        else:
            # As Keras does: the weights load, the optimizer starts afresh.
            warnings.warn(f"{where}: skipping the optimizer state: the file holds {len(values)} optimizer "
                          f"variables, {type(model.optimizer).__name__} of model '{model.name}' has {expected} "
                          f"(iterations, {'' if schedule else 'learning rate, '}{len(order)} slots)", stacklevel=3)
            return
    current = dict(model._core.optimizer_state())
    state = [("iterations", np.asarray(values[0]).astype(np.asarray(current["iterations"]).dtype))]
    slots = values[scalars:]
    shapes = {n: w.shape for layer in model._layers
              for n, w in zip(layer._core.weight_names(), layer.get_weights())}
    for name, value in zip(order, slots):
        if value.shape != shapes[name.rsplit("/", 1)[0]]:
            raise ValueError(f"{where}: optimizer variable for {name} has shape {value.shape}, the weight has "
                             f"{shapes[name.rsplit('/', 1)[0]]}")
        state.append((name, np.ascontiguousarray(value, dtype=np.float32)))
    # mdtrain's own order: by kind, then by variable.
    state[1:] = sorted(state[1:], key=lambda item: (slot_kinds(model.optimizer).index(item[0].rsplit("/", 1)[1]),
                                                     order.index(item[0])))
    model._core.set_optimizer_state(state)
    # The file holds the rate as float32: keep the optimizer's own (more precise) value when it
    # rounds to the stored one.
    if not schedule and np.float32(model.optimizer.learning_rate.numpy()) != np.float32(values[1]):
        model.optimizer.learning_rate = float(values[1])


def _snake_case(class_name):
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", class_name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def layer_keys(model):
    """The group name Keras gives each layer of the model."""
    used, keys = {}, []
    for layer in model._layers:
        base = _snake_case(type(layer).__name__)
        count = used.get(base)
        used[base] = 0 if count is None else count + 1
        keys.append(base if count is None else f"{base}_{count + 1}")
    return keys


_RECURRENT = ("SimpleRNN", "LSTM", "GRU")


def _weight_groups(layer, count):
    """Where Keras keeps a layer's `count` weights under its group, in get_weights() order:
    [(subgroup path, how many)]. A recurrent layer's are its cell's; a Bidirectional's, its forward
    then its backward layer's cells'."""
    kind = type(layer).__name__
    if kind in _RECURRENT:
        return [("cell/vars", count)]
    if kind == "Bidirectional":
        return [("forward_layer/cell/vars", count // 2), ("backward_layer/cell/vars", count - count // 2)]
    return [("vars", count)]


def write(model, path, include_optimizer=True):
    h5py = _h5py()
    with h5py.File(path, "w") as f:
        f.create_group("vars").attrs["name"] = model.name
        layers = f.create_group("layers", track_order=True)
        if model._graph is not None:  # Keras lists a functional model's InputLayers among its layers
            for k, name in enumerate(model._graph.input_names):
                layers.create_group("input_layer" if k == 0 else f"input_layer_{k}").create_group(
                    "vars").attrs["name"] = name
        for layer, key in zip(model._layers, layer_keys(model)):
            layer_group = layers.create_group(key)
            layer_group.create_group("vars").attrs["name"] = layer.name
            weights = iter(layer.get_weights())
            for sub, count in _weight_groups(layer, len(layer.get_weights())):
                group = layer_group.require_group(sub)
                if sub != "vars":
                    group.attrs["name"] = sub.split("/")[0]
                for i in range(count):
                    group.create_dataset(str(i), data=np.asarray(next(weights), np.float32))
        if include_optimizer and model.optimizer is not None:
            group = f.create_group("optimizer").create_group("vars")
            group.attrs["name"] = model.optimizer.name
            for i, v in enumerate(optimizer_to_keras(model)):
                group.create_dataset(str(i), data=v)


def weights_file_bound(model):
    """A bound on the size of the model's weights file: every weight and up to four optimizer
    variables per weight (Adam's moments, AMSGrad's maximum, a margin) as float64, plus HDF5's
    overhead per object."""
    weights = [w for layer in model._layers for w in layer.get_weights()]
    return 8 * 5 * sum(w.size for w in weights) + 16 * 4096 * (len(weights) + len(model._layers) + 16) + (16 << 20)


def _vars(group, shapes):
    """The variables 0..len(shapes)-1 of a vars group, each checked against its shape before it
    is read."""
    return [group.read(str(i), shape=shape) for i, shape in enumerate(shapes)]


def _optimizer_shapes(model):
    """The shapes of the optimizer's variables as Keras lists them: iterations, the learning rate
    (not for a schedule), then one slot per entry of the Keras slot order."""
    shapes = {n: w.shape for layer in model._layers
              for n, w in zip(layer._core.weight_names(), layer.get_weights())}
    scalars = [()] if isinstance(model.optimizer._learning_rate, LearningRateSchedule) else [(), ()]
    return scalars, [shapes[name.rsplit("/", 1)[0]] for name in _keras_slot_order(model)]


def read(model, path, where, include_optimizer=True, display=None):
    """Sets the model's weights (and, when compiled and present, optimizer state) from a file.

    Read through mdtrain._safe_hdf5: links, external storage and virtual datasets are refused, and
    every dataset is checked against the shape of the variable it sets before it is read. Errors
    name `display` (default: the path) as the file."""
    with _safe_hdf5.File(path, where, display) as f:
        path = f.path
        stored = f.root.group("layers")
        if stored is None:
            raise ValueError(f"{where}: {path} has no 'layers' group: not a Keras 3 weights file")
        names = layer_keys(model)
        keys = stored.keys()
        if model._graph is not None:
            # Keras numbers a functional model's layer groups in its own graph order; each group
            # names its layer, so match by name where every layer is found that way.
            by_name = {}
            for key in keys:
                layer_group = stored.get(key)
                vars_group = layer_group.group("vars") if isinstance(layer_group, _safe_hdf5.Group) else None
                name = vars_group.attr("name") if vars_group is not None else None
                if isinstance(name, str):
                    by_name[name] = key
            if all(layer.name in by_name for layer in model._layers):
                names = [by_name[layer.name] for layer in model._layers]
        missing = [n for n in names if n not in keys]
        if missing:
            raise ValueError(f"{where}: {path} holds layers {sorted(keys)}, model '{model.name}' needs "
                             f"{names} (missing: {missing})")
        weights = []
        for layer, name in zip(model._layers, names):
            all_expected = [w.shape for w in layer.get_weights()]
            layer_group = stored.group(name)
            begin = 0
            groups = _weight_groups(layer, len(all_expected))
            legacy = layer_group.group("vars") if layer_group is not None else None
            if groups[0][0] != "vars" and legacy is not None and all_expected and len(legacy) == len(all_expected):
                groups = [("vars", len(all_expected))]  # as mdtrain wrote recurrent layers before: all in vars
            for sub, count in groups:
                expected = all_expected[begin:begin + count]
                begin += count
                group = layer_group.group(sub) if layer_group is not None else None
                stored_count = len(group) if group is not None else 0
                # The shapes from the metadata (nothing read yet), to name the layer when they differ.
                found = [getattr(group.get(str(i)), "shape", None) for i in range(stored_count)]
                if found != expected:
                    first = next((i for i, (f, e) in enumerate(zip(found, expected)) if f != e), None)
                    detail = "" if first is None else (f" (dataset {group.path}/{first} has shape {found[first]}, "
                                                       f"expected {expected[first]})")
                    raise ValueError(f"{where}: layer '{name}' in {path} has weights of shapes {found} in {sub}, the "
                                     f"model's layer '{layer.name}' has {expected}{detail}")
                weights += _vars(group, expected) if expected else []
        optimizer = None
        group = f.root.group("optimizer/vars") if include_optimizer and model.optimizer is not None else None
        if group is not None and len(group):
            scalars, slots = _optimizer_shapes(model)
            count = len(group)
            if count == len(scalars) + len(slots):
                optimizer = _vars(group, scalars + slots)
            elif count == len(scalars):
                optimizer = _vars(group, scalars)
            else:  # optimizer_from_keras warns and skips it, as Keras does; nothing is read
                optimizer = [None] * count
    if optimizer and optimizer[0] is not None:
        # Checked before any weight is set: a refused file changes nothing.
        _check_optimizer_scalars(model, optimizer, path, where)
    model.set_weights(weights)
    if optimizer:
        optimizer_from_keras(model, optimizer, where)
