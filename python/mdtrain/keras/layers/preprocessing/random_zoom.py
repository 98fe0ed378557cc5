"""keras.layers.RandomZoom: in training, each image zoomed about its center by 1 + a factor
drawn in height_factor (and width_factor, or the same when None); positive zooms out."""
import numpy as np

from mdtrain.keras.layers.preprocessing.random_affine import RandomAffine, signed_range
from mdtrain.keras.layers.preprocessing.preprocessing_layer import PREPROCESSING_CLASSES


class RandomZoom(RandomAffine):
    def __init__(self, height_factor, width_factor=None, fill_mode="reflect", interpolation="bilinear", seed=None,
                 fill_value=0.0, data_format=None, **kwargs):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.height_factor, self.width_factor = height_factor, width_factor
        self._height = signed_range(height_factor, "RandomZoom", "height_factor")
        self._width = None if width_factor is None else signed_range(width_factor, "RandomZoom", "width_factor")

    def _transforms(self, n, height, width):
        zy = 1 + self._rng.uniform(*self._height, size=n)
        zx = zy if self._width is None else 1 + self._rng.uniform(*self._width, size=n)
        zeros = np.zeros(n)
        return np.stack([zx, zeros, (width - 1) / 2 * (1 - zx), zeros, zy, (height - 1) / 2 * (1 - zy), zeros, zeros],
                        1)

    def _config(self):
        return {"height_factor": self.height_factor, "width_factor": self.width_factor, **super()._config()}


PREPROCESSING_CLASSES["RandomZoom"] = RandomZoom
