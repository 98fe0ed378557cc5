"""keras.initializers: the objects; the sampling itself happens in C++ at build time (a given
seed= makes the values depend on that seed alone, as in Keras: nn/initializer.cpp Seeded)."""
import numpy as np


class Initializer:
    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        return f"{type(self).__name__}({self.get_config()})"


class _Seeded(Initializer):
    def __init__(self, seed=None):
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                                 or not 0 <= seed < 2**53):
            raise ValueError(f"{type(self).__name__}: seed must be None or a non-negative integer below 2^53, got "
                             f"{seed!r}")
        self.seed = None if seed is None else int(seed)

    def get_config(self):
        return {"seed": self.seed}


class GlorotUniform(_Seeded):
    pass


class GlorotNormal(_Seeded):
    pass


class HeNormal(_Seeded):
    pass


class HeUniform(_Seeded):
    pass


class Zeros(Initializer):
    pass


class Ones(Initializer):
    pass


class Constant(Initializer):
    def __init__(self, value=0.0):
        self.value = float(value)

    def get_config(self):
        return {"value": self.value}


class RandomNormal(_Seeded):
    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        super().__init__(seed)
        self.mean, self.stddev = float(mean), float(stddev)

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


class RandomUniform(_Seeded):
    def __init__(self, minval=-0.05, maxval=0.05, seed=None):
        super().__init__(seed)
        self.minval, self.maxval = float(minval), float(maxval)

    def get_config(self):
        return {"minval": self.minval, "maxval": self.maxval, "seed": self.seed}


class Orthogonal(_Seeded):
    """Keras's Orthogonal (the recurrent layers' recurrent_initializer): an orthonormal matrix
    times gain (drawn in C++: QR of a normal matrix by Gram-Schmidt, so not Keras's numbers)."""

    def __init__(self, gain=1.0, seed=None):
        super().__init__(seed)
        self.gain = float(gain)

    def get_config(self):
        return {"gain": self.gain, "seed": self.seed}


orthogonal = Orthogonal
glorot_uniform, glorot_normal, he_normal, he_uniform = GlorotUniform, GlorotNormal, HeNormal, HeUniform
zeros, ones, constant, random_normal, random_uniform = Zeros, Ones, Constant, RandomNormal, RandomUniform


def get(identifier):
    if identifier is None or isinstance(identifier, (str, Initializer)):
        return identifier
    raise ValueError(f"Could not interpret initializer identifier: {identifier!r}")
