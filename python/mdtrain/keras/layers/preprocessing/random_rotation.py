"""keras.layers.RandomRotation: in training, each image rotated about its center by an angle
drawn in factor * 360 degrees."""
import numpy as np

from mdtrain.keras.layers.preprocessing.random_affine import RandomAffine, signed_range
from mdtrain.keras.layers.preprocessing.preprocessing_layer import PREPROCESSING_CLASSES


class RandomRotation(RandomAffine):
    def __init__(self, factor, fill_mode="reflect", interpolation="bilinear", seed=None, fill_value=0.0,
                 data_format=None, **kwargs):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.factor = factor
        self._range = signed_range(factor, "RandomRotation", "factor")

    def _transforms(self, n, height, width):
        angle = np.deg2rad(self._rng.uniform(self._range[0] * 360, self._range[1] * 360, size=n))
        cos, sin = np.cos(angle), np.sin(angle)
        cx, cy = 0.5 * (width - 1), 0.5 * (height - 1)
        # Keras's _compute_affine_matrix without scale, shear or translation.
        zeros = np.zeros(n)
        return np.stack([cos, -sin, cx - cx * cos + cy * sin, sin, cos, cy - cx * sin - cy * cos, zeros, zeros], 1)

    def _config(self):
        return {"factor": self.factor, **super()._config()}


PREPROCESSING_CLASSES["RandomRotation"] = RandomRotation
