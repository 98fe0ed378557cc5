"""The process-wide seed source (keras.utils.set_random_seed).

Models and layers draw their seeds from here when created, so one call to set_random_seed makes
initialisation, dropout masks and shuffling reproducible. Without it seeds come from the OS, as
in Keras.

Two streams: draw_seed() for what has weights (a model's initialisation seed, a recurrent
layer's), draw_mask_seed() for what has none (Dropout's masks). A layer without weights thus never
shifts the seeds of the weights created after it: Sequential([Dense, Dropout, Dense]) starts from
the same weights as Sequential([Dense, Dense]), as in Keras, where such a layer draws nothing for
initialisation.
"""
import os
import random as _py_random

import numpy as np

_MASK_STREAM = 0x6D61736B  # "mask": the second stream's key beside the user's seed


def _os_generator():
    return np.random.default_rng(int.from_bytes(os.urandom(8), "little"))


_generator = _os_generator()
_mask_generator = _os_generator()


def set_random_seed(seed):
    """Seeds Python's random, NumPy's global RNG and mdtrain's seed source."""
    global _generator, _mask_generator
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"set_random_seed: seed must be a non-negative integer, got {seed!r}")
    seed = int(seed)
    _py_random.seed(seed)
    np.random.seed(seed % (2**32))
    _generator = np.random.default_rng(seed)
    _mask_generator = np.random.default_rng([seed, _MASK_STREAM])


def draw_seed():
    """A fresh 53-bit seed (exactly representable in the JSON of a saved model)."""
    return int(_generator.integers(0, 2**53))


def draw_mask_seed():
    """A fresh 53-bit seed for a layer without weights (Dropout's masks), from its own stream."""
    return int(_mask_generator.integers(0, 2**53))


def _state_of(generator):
    state = generator.bit_generator.state
    return {"bit_generator": state["bit_generator"], "state": {k: str(v) for k, v in state["state"].items()},
            "has_uint32": int(state["has_uint32"]), "uinteger": str(state["uinteger"])}


def _generator_from(saved):
    generator = np.random.default_rng()
    if saved["bit_generator"] != generator.bit_generator.state["bit_generator"]:
        raise ValueError(f"the saved seed source is a {saved['bit_generator']}, this one a "
                         f"{generator.bit_generator.state['bit_generator']}")
    generator.bit_generator.state = {"bit_generator": saved["bit_generator"],
                                     "state": {k: int(v) for k, v in saved["state"].items()},
                                     "has_uint32": int(saved["has_uint32"]), "uinteger": int(saved["uinteger"])}
    return generator


def _get_state():
    """The seed source's state, JSON-safe (large integers as strings), for BackupAndRestore."""
    return dict(_state_of(_generator), masks=_state_of(_mask_generator))


def _set_state(saved):
    global _generator, _mask_generator
    generator = _generator_from(saved)
    # A backup written before the mask stream existed holds only the first stream.
    masks = _generator_from(saved["masks"]) if "masks" in saved else _mask_generator
    _generator, _mask_generator = generator, masks


def build_with_seed(build):
    """Calls build(seed) with a seed of the weights stream, which stays drawn only when build
    returns True (the layer it built has weights): an eagerly built Flatten shifts nothing."""
    global _generator
    state = _generator.bit_generator.state
    if not build(draw_seed()):
        _generator.bit_generator.state = state
