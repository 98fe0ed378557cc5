"""Reading a parameter-server checkpoint into a model in one process.

The servers write logical pieces (each holds its rows of each variable and of its optimizer
slots, see docs/parameter_server.md), so a checkpoint written by k servers assembles into whole
variables here, as it does on k' servers.
"""
import os

import numpy as np

from mdtrain import _core


def is_ps_checkpoint(path):
    return os.path.isdir(path) and any(name.endswith(".piece") for name in os.listdir(path))


def load_into_model(model, directory):
    """Sets the model's weights (and, when it is compiled with the same optimizer, its optimizer
    state) from a parameter-server checkpoint directory."""
    checkpoint = _core.read_ps_checkpoint(directory)
    variables = checkpoint["variables"]
    names = [n for layer in model.layers for n in layer._core.weight_names()]
    if any(n not in variables for n in names):
        # Another process's auto-generated names (dense_3 for dense): as Keras's load_weights, match
        # the weights in order when they are as many.
        if len(variables) != len(names):
            raise ValueError(f"load_weights: the parameter-server checkpoint in {directory} holds {list(variables)}, "
                             f"which do not fit model '{model.name}' ({names})")
        variables = dict(zip(names, variables.values()))
    values = [variables[n][0] for n in names]
    mine = [w.shape for w in model.get_weights()]
    if [v.shape for v in values] != mine:
        raise ValueError(f"load_weights: the checkpoint's shapes {[v.shape for v in values]} do not fit model "
                         f"'{model.name}' ({mine})")
    model.set_weights(values)
    if getattr(model, "optimizer", None) is None:
        return
    current = model._core.optimizer_state()
    if checkpoint["optimizer"] != model.optimizer._class_name:
        return  # another optimizer: its slots mean nothing here (as Keras skips a mismatched optimizer)
    state = []
    for name, array in current:
        if name == "iterations":
            state.append((name, np.asarray(checkpoint["iterations"], dtype=array.dtype)))
            continue
        variable, slot = name.rsplit("/", 1)
        state.append((name, np.ascontiguousarray(variables[variable][1][slot], dtype=array.dtype)))
    model._core.set_optimizer_state(state)
