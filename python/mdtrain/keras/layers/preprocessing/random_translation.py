"""keras.layers.RandomTranslation: in training, each image shifted by fractions of its height and
width drawn in height_factor and width_factor."""
import numpy as np

from mdtrain.keras.layers.preprocessing.random_affine import RandomAffine, signed_range
from mdtrain.keras.layers.preprocessing.preprocessing_layer import PREPROCESSING_CLASSES


class RandomTranslation(RandomAffine):
    def __init__(self, height_factor, width_factor, fill_mode="reflect", interpolation="bilinear", seed=None,
                 fill_value=0.0, data_format=None, **kwargs):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.height_factor, self.width_factor = height_factor, width_factor
        self._height = signed_range(height_factor, "RandomTranslation", "height_factor")
        self._width = signed_range(width_factor, "RandomTranslation", "width_factor")

    def _transforms(self, n, height, width):
        dy = self._rng.uniform(*self._height, size=n) * height
        dx = self._rng.uniform(*self._width, size=n) * width
        ones, zeros = np.ones(n), np.zeros(n)
        return np.stack([ones, zeros, -dx, zeros, ones, -dy, zeros, zeros], 1)

    def _config(self):
        return {"height_factor": self.height_factor, "width_factor": self.width_factor, **super()._config()}


PREPROCESSING_CLASSES["RandomTranslation"] = RandomTranslation
