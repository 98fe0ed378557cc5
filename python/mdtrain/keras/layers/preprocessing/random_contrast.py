"""keras.layers.RandomContrast: in training, each image's contrast scaled by a factor drawn in
[1 - lower, 1 + upper] around its per-channel mean, then clipped to value_range."""
import numpy as np

from mdtrain.keras.layers.preprocessing.preprocessing_layer import PREPROCESSING_CLASSES, SeededLayer
from mdtrain.keras.layers.preprocessing.resizing import check_images


def factor_range(factor, owner, low=0.0, high=1.0):
    """A factor given as x or (lower, upper), as the pair (lower, upper) within [low, high]."""
    pair = tuple(factor) if isinstance(factor, (tuple, list)) else (factor, factor)
    if len(pair) != 2 or any(not isinstance(f, (int, float, np.integer, np.floating)) for f in pair):
        raise ValueError(f"{owner}: factor must be a number or a tuple of two numbers, got {factor!r}")
    if any(f < low or f > high for f in pair):
        raise ValueError(f"{owner}: factor must be in [{low}, {high}], got {factor!r}")
    return float(pair[0]), float(pair[1])


class RandomContrast(SeededLayer):
    def __init__(self, factor, value_range=(0, 255), seed=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        self.factor = factor
        self._lower, self._upper = factor_range(factor, "RandomContrast")
        self.value_range = tuple(value_range)

    def _compute(self, x, training):
        check_images(x, f'RandomContrast "{self.name}"')
        images = x.astype(np.float32).reshape((-1,) + x.shape[-3:])
        factors = self._rng.uniform(1.0 - self._lower, 1.0 + self._upper, size=(len(images), 1, 1, 1))
        mean = images.mean(axis=(1, 2), keepdims=True)
        out = (images - mean) * factors.astype(np.float32) + mean
        return np.clip(out, self.value_range[0], self.value_range[1]).reshape(x.shape)

    def _config(self):
        return {"factor": self.factor, "value_range": self.value_range}


PREPROCESSING_CLASSES["RandomContrast"] = RandomContrast
