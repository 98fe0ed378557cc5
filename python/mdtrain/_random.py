"""The process-wide seed source (keras.utils.set_random_seed).

Models and layers draw their seeds from here when created, so one call to set_random_seed makes
initialisation, dropout masks and shuffling reproducible. Without it seeds come from the OS, as
in Keras.
"""
import os
import random as _py_random

import numpy as np

_generator = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))


def set_random_seed(seed):
    """Seeds Python's random, NumPy's global RNG and mdtrain's seed source."""
    global _generator
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"set_random_seed: seed must be a non-negative integer, got {seed!r}")
    seed = int(seed)
    _py_random.seed(seed)
    np.random.seed(seed % (2**32))
    _generator = np.random.default_rng(seed)


def draw_seed():
    """A fresh 53-bit seed (exactly representable in the JSON of a saved model)."""
    return int(_generator.integers(0, 2**53))
