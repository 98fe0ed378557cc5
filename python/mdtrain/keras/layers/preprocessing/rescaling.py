"""keras.layers.Rescaling: inputs * scale + offset in float32 (e.g. scale=1/255 for pixels)."""
import numpy as np

from mdtrain.keras.layers.preprocessing.preprocessing_layer import PREPROCESSING_CLASSES, PreprocessingLayer


def _number_or_list(value, argname):
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    try:
        return np.asarray(value, dtype=np.float64).tolist()
    except (TypeError, ValueError):
        raise TypeError(f"Rescaling: {argname} must be a number or a list of numbers, got {value!r}") from None


class Rescaling(PreprocessingLayer):
    def __init__(self, scale, offset=0.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = _number_or_list(scale, "scale")
        self.offset = _number_or_list(offset, "offset")

    def _compute(self, x, training):
        dtype = np.dtype(self.dtype)
        # Keras casts scale and offset to the compute dtype first: the products round as there.
        return x.astype(dtype) * np.asarray(self.scale, dtype=dtype) + np.asarray(self.offset, dtype=dtype)

    def _config(self):
        return {"scale": self.scale, "offset": self.offset}


PREPROCESSING_CLASSES["Rescaling"] = Rescaling
