"""Keras's argument forms turned into the values a C++ layer's config takes.

The C++ layers check every value (counts, signs, padding, data_format) with messages naming the
layer; these only turn Keras's forms (an int for a pair, None for defaults) into lists, and set a
layer's attributes back from its C++ config (so a loaded layer reports its settings)."""
import json

import numpy as np

from mdtrain.keras import _naming


def _keras_default_name(kwargs, prefix):
    """Keras names these conv2d, max_pooling2d, ... (its snake case keeps "2d" in one piece)."""
    if kwargs.get("name") is None:
        kwargs["name"] = _naming.unique_name(prefix)


def _int_pair(value, argname, layer_name):
    """Keras's standardize_tuple: an int n is (n, n); anything else must be a sequence of ints."""
    return _int_tuple(value, 2, argname, layer_name)


def _int_tuple(value, n, argname, layer_name):
    """Keras's standardize_tuple for an n-tuple (n = 1: the 1-D layers); C++ checks the length."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return [int(value)] * n
    message = (f'layer "{layer_name}": The `{argname}` argument must be a tuple of {n} integers. '
               f"Received {argname}={value!r}")
    if isinstance(value, str):
        raise ValueError(message)
    try:
        items = tuple(value)
    except TypeError:
        raise ValueError(message) from None
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{message} including element {v!r} of type {type(v)}")
    return [int(v) for v in items]


def _string_arg(value, argname, layer_name, default=None):
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise ValueError(f'layer "{layer_name}": The `{argname}` argument must be a string. Received {argname}={value!r}')
    return value


def _set_attributes_from_config(layer, names):
    config = json.loads(layer._core.config_json())
    for name in names:
        value = config[name]
        setattr(layer, name, tuple(value) if isinstance(value, list) else value)


def _number_arg(value, argname, layer_name, cls_name):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f'{cls_name} "{layer_name}": {argname} must be a number, got {value!r}')
    return float(value)


def _copy_config_attributes(layer, names):
    """Sets layer.<name> from the C++ layer's config (so a loaded layer reports its settings)."""
    config = json.loads(layer._core.config_json())
    for name in names:
        setattr(layer, name, config[name])


def _no_constraints(layer_name, cls_name, **constraints):
    for arg, value in constraints.items():
        if value is not None:
            raise NotImplementedError(f'{cls_name} "{layer_name}": {arg} is not supported yet')


def _positive_int(value, argname):
    """Keras's check of Embedding's sizes: an int (not a bool) ...; C++ then refuses values < 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"`{argname}` must be a positive integer. Received: {argname}={value!r} "
                         f"(of type {type(value).__name__}).")
    return int(value)
