"""The base of RandomRotation, RandomZoom and RandomTranslation: in training, each image moved by
its own random affine transform (affine_transform.py), with Keras's fill and interpolation
arguments; unchanged otherwise."""
import numpy as np

from mdtrain.keras.layers.preprocessing.affine_transform import affine_transform, check_fill
from mdtrain.keras.layers.preprocessing.preprocessing_layer import SeededLayer
from mdtrain.keras.layers.preprocessing.resizing import check_images


def signed_range(factor, owner, argname):
    """A factor x as (-x, x), or (lower, upper) as given, each in [-1, 1]."""
    pair = tuple(factor) if isinstance(factor, (tuple, list)) else (-factor, factor)
    if len(pair) != 2 or any(not isinstance(f, (int, float, np.integer, np.floating)) for f in pair):
        raise ValueError(f"{owner}: {argname} must be a number or a tuple of two numbers, got {factor!r}")
    if pair[0] > pair[1] or any(abs(f) > 1 for f in pair):
        raise ValueError(f"{owner}: {argname} must be within [-1, 1] with lower <= upper, got {factor!r}")
    return float(pair[0]), float(pair[1])


class RandomAffine(SeededLayer):
    def __init__(self, fill_mode="reflect", interpolation="bilinear", seed=None, fill_value=0.0, data_format=None,
                 **kwargs):
        super().__init__(seed=seed, **kwargs)
        check_fill(fill_mode, interpolation, type(self).__name__)
        if data_format not in (None, "channels_last"):
            raise ValueError(f"{type(self).__name__}: only data_format='channels_last' is supported, got "
                             f"{data_format!r}")
        self.fill_mode, self.interpolation, self.fill_value = fill_mode, interpolation, float(fill_value)
        self.data_format = "channels_last"

    def _transforms(self, n, height, width):
        """One 8-number transform per image (N, 8)."""
        raise NotImplementedError

    def _compute(self, x, training):
        check_images(x, f'{type(self).__name__} "{self.name}"')
        images = x.astype(np.float32).reshape((-1,) + x.shape[-3:])
        transforms = self._transforms(len(images), images.shape[1], images.shape[2])
        return affine_transform(images, transforms, self.interpolation, self.fill_mode,
                                self.fill_value).reshape(x.shape)

    def _config(self):
        return {"fill_mode": self.fill_mode, "interpolation": self.interpolation, "fill_value": self.fill_value,
                "data_format": self.data_format}
