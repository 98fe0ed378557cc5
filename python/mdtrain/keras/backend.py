"""keras.backend: the few process-wide settings mdtrain has."""
from mdtrain.keras import _naming


def clear_session():
    """Resets default layer and model names (dense, dense_1, ... start again)."""
    _naming.reset()


def floatx():
    return "float32"


def backend():
    return "mdtrain"
