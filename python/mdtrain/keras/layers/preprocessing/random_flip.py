"""keras.layers.RandomFlip: in training, each image flipped left-right and/or up-down with
probability 1/2 each; unchanged otherwise."""
import numpy as np

from mdtrain.keras.layers.preprocessing.preprocessing_layer import PREPROCESSING_CLASSES, SeededLayer
from mdtrain.keras.layers.preprocessing.resizing import check_images

_MODES = ("horizontal", "vertical", "horizontal_and_vertical")


class RandomFlip(SeededLayer):
    def __init__(self, mode="horizontal_and_vertical", seed=None, data_format=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        if mode not in _MODES:
            raise ValueError(f"RandomFlip layer {self.name} received an unknown mode argument {mode!r}; expected "
                             f"one of {_MODES}")
        self.mode = mode
        self.data_format = "channels_last"

    def _compute(self, x, training):
        check_images(x, f'RandomFlip "{self.name}"')
        images = x.astype(np.float32).reshape((-1,) + x.shape[-3:])
        out = images.copy()
        if self.mode in ("horizontal", "horizontal_and_vertical"):
            flip = self._rng.random(len(out)) < 0.5
            out[flip] = out[flip][:, :, ::-1]
        if self.mode in ("vertical", "horizontal_and_vertical"):
            flip = self._rng.random(len(out)) < 0.5
            out[flip] = out[flip][:, ::-1]
        return out.reshape(x.shape)

    def _config(self):
        return {"mode": self.mode, "data_format": self.data_format}


PREPROCESSING_CLASSES["RandomFlip"] = RandomFlip
