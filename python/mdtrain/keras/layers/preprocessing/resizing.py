"""keras.layers.Resizing: images (..., height, width, channels) resized as tf.image.resize does
(bilinear or nearest with half-pixel centers, no antialiasing), optionally center-cropped first
to the target's aspect ratio."""
import numpy as np

from mdtrain.keras.layers.preprocessing.preprocessing_layer import PREPROCESSING_CLASSES, PreprocessingLayer

_INTERPOLATIONS = ("bilinear", "nearest")


def _bilinear_axis(out_size, in_size):
    """TF's ResizeBilinear (half_pixel_centers) sampling of one axis: lower, upper, weight."""
    src = (np.arange(out_size) + 0.5) * (in_size / out_size) - 0.5
    floor = np.floor(src)
    lower = np.maximum(floor, 0).astype(np.int64)
    upper = np.minimum(np.ceil(src), in_size - 1).astype(np.int64)
    return lower, upper, (src - floor).astype(np.float32)


def resize_images(images, height, width, interpolation="bilinear"):
    """`images` (..., H, W, C) resized to (..., height, width, C) in float32."""
    images = np.asarray(images, dtype=np.float32)
    in_h, in_w = images.shape[-3], images.shape[-2]
    if interpolation == "nearest":
        # TF's HalfPixelScalerForNN: floor((out + 0.5) * scale), clamped.
        rows = np.minimum(np.floor((np.arange(height) + 0.5) * (in_h / height)), in_h - 1).astype(np.int64)
        cols = np.minimum(np.floor((np.arange(width) + 0.5) * (in_w / width)), in_w - 1).astype(np.int64)
        return images[..., rows, :, :][..., :, cols, :]
    top, bottom, dy = _bilinear_axis(height, in_h)
    left, right, dx = _bilinear_axis(width, in_w)
    dx = dx[:, None]
    upper = images[..., top, :, :]
    lower = images[..., bottom, :, :]
    up = upper[..., left, :] + (upper[..., right, :] - upper[..., left, :]) * dx
    down = lower[..., left, :] + (lower[..., right, :] - lower[..., left, :]) * dx
    return up + (down - up) * dy[:, None, None]


def crop_to_aspect_ratio(images, height, width):
    """The centered crop of `images` with the aspect ratio height:width (Keras's arithmetic)."""
    in_h, in_w = images.shape[-3], images.shape[-2]
    crop_h = max(min(in_h, int(float(in_w * height) / width)), 1)
    crop_w = max(min(in_w, int(float(in_h * width) / height)), 1)
    top, left = int(float(in_h - crop_h) / 2), int(float(in_w - crop_w) / 2)
    return images[..., top:top + crop_h, left:left + crop_w, :]


def check_image_size(height, width, owner):
    for argname, value in (("height", height), ("width", width)):
        if not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{owner}: {argname} must be a positive integer, got {value!r}")


def check_images(x, owner):
    if x.ndim not in (3, 4):
        raise ValueError(f"{owner} takes images of shape (height, width, channels) or (batch, height, width, "
                         f"channels), got shape {x.shape}")


class Resizing(PreprocessingLayer):
    def __init__(self, height, width, interpolation="bilinear", crop_to_aspect_ratio=False, pad_to_aspect_ratio=False,
                 fill_mode="constant", fill_value=0.0, antialias=False, data_format=None, **kwargs):
        super().__init__(**kwargs)
        check_image_size(height, width, "Resizing")
        if interpolation not in _INTERPOLATIONS:
            raise ValueError(f"Resizing: interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}")
        for argname, value in (("pad_to_aspect_ratio", pad_to_aspect_ratio), ("antialias", antialias)):
            if value:
                raise ValueError(f"Resizing: {argname}=True is not supported yet")
        if data_format not in (None, "channels_last"):
            raise ValueError(f"Resizing: only data_format='channels_last' is supported, got {data_format!r}")
        self.height, self.width = int(height), int(width)
        self.interpolation = interpolation
        self.crop_to_aspect_ratio = bool(crop_to_aspect_ratio)
        self.pad_to_aspect_ratio = False
        self.fill_mode, self.fill_value = fill_mode, fill_value
        self.antialias = False
        self.data_format = "channels_last"

    def _compute(self, x, training):
        check_images(x, f'Resizing "{self.name}"')
        if self.crop_to_aspect_ratio:
            x = crop_to_aspect_ratio(x, self.height, self.width)
        return resize_images(x, self.height, self.width, self.interpolation)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-3]) + (self.height, self.width, input_shape[-1])

    def _config(self):
        return {"height": self.height, "width": self.width, "interpolation": self.interpolation,
                "crop_to_aspect_ratio": self.crop_to_aspect_ratio, "pad_to_aspect_ratio": self.pad_to_aspect_ratio,
                "fill_mode": self.fill_mode, "fill_value": self.fill_value, "antialias": self.antialias,
                "data_format": self.data_format}


PREPROCESSING_CLASSES["Resizing"] = Resizing
