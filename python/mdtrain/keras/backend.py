"""keras.backend: the few process-wide settings mdtrain has, and get_value/set_value."""
import numpy as np

from mdtrain.keras import _naming


def clear_session():
    """Resets default layer and model names (dense, dense_1, ... start again)."""
    _naming.reset()


def floatx():
    return "float32"


def backend():
    return "mdtrain"


def get_value(x):
    """The value of a variable (optimizer.learning_rate, ...) as a NumPy value; x itself for a number."""
    if hasattr(x, "numpy"):
        return x.numpy()
    return np.asarray(x) if isinstance(x, (list, tuple)) else x


def set_value(x, value):
    """Assigns value to the variable x (optimizer.learning_rate, ...)."""
    if not hasattr(x, "assign"):
        raise TypeError(f"set_value: {x!r} is not a variable (it has no assign())")
    x.assign(value)
