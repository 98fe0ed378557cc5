"""keras.layers.CenterCrop: the central height x width of each image; an image smaller than
that is cropped to the aspect ratio and resized up, as Keras's smart_resize does."""
import numpy as np

from mdtrain.keras.layers.preprocessing.preprocessing_layer import PREPROCESSING_CLASSES, PreprocessingLayer
from mdtrain.keras.layers.preprocessing.resizing import (check_image_size, check_images, crop_to_aspect_ratio,
                                                         resize_images)


class CenterCrop(PreprocessingLayer):
    def __init__(self, height, width, data_format=None, **kwargs):
        super().__init__(**kwargs)
        check_image_size(height, width, "CenterCrop")
        if data_format not in (None, "channels_last"):
            raise ValueError(f"CenterCrop: only data_format='channels_last' is supported, got {data_format!r}")
        self.height, self.width = int(height), int(width)
        self.data_format = "channels_last"

    def _compute(self, x, training):
        check_images(x, f'CenterCrop "{self.name}"')
        h_diff, w_diff = x.shape[-3] - self.height, x.shape[-2] - self.width
        if h_diff >= 0 and w_diff >= 0:
            top, left = int(h_diff / 2), int(w_diff / 2)
            return x[..., top:top + self.height, left:left + self.width, :].astype(np.float32)
        return resize_images(crop_to_aspect_ratio(x, self.height, self.width), self.height, self.width)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-3]) + (self.height, self.width, input_shape[-1])

    def _config(self):
        return {"height": self.height, "width": self.width, "data_format": self.data_format}


PREPROCESSING_CLASSES["CenterCrop"] = CenterCrop
