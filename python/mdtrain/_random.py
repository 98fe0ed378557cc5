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


def _get_state():
    """The seed source's state, JSON-safe (large integers as strings), for BackupAndRestore."""
    state = _generator.bit_generator.state
    return {"bit_generator": state["bit_generator"], "state": {k: str(v) for k, v in state["state"].items()},
            "has_uint32": int(state["has_uint32"]), "uinteger": str(state["uinteger"])}


def _set_state(saved):
    global _generator
    generator = np.random.default_rng()
    if saved["bit_generator"] != generator.bit_generator.state["bit_generator"]:
        raise ValueError(f"the saved seed source is a {saved['bit_generator']}, this one a "
                         f"{generator.bit_generator.state['bit_generator']}")
    generator.bit_generator.state = {"bit_generator": saved["bit_generator"],
                                     "state": {k: int(v) for k, v in saved["state"].items()},
                                     "has_uint32": int(saved["has_uint32"]), "uinteger": int(saved["uinteger"])}
    _generator = generator
