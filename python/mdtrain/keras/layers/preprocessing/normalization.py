"""keras.layers.Normalization: (inputs - mean) / sqrt(variance) per position of `axis`, with mean
and variance given or learnt by adapt() from an array, a tensor, a Dataset or batches."""
import numpy as np

from mdtrain.keras.layers.preprocessing.preprocessing_layer import PREPROCESSING_CLASSES, PreprocessingLayer, batches_of

_EPSILON = 1e-7  # keras.backend.epsilon(): the floor of the standard deviation


def _axes(axis):
    if axis is None:
        return ()
    if isinstance(axis, (int, np.integer)):
        return (int(axis),)
    try:
        return tuple(int(a) for a in axis)
    except (TypeError, ValueError):
        raise TypeError(f"Normalization: axis must be an integer, a tuple of integers or None, got {axis!r}") from None


class Normalization(PreprocessingLayer):
    def __init__(self, axis=-1, mean=None, variance=None, invert=False, **kwargs):
        super().__init__(**kwargs)
        self.axis = _axes(axis)
        self.input_mean = mean
        self.input_variance = variance
        self.invert = bool(invert)
        if (mean is not None) != (variance is not None):
            raise ValueError("When setting values directly, both `mean` and `variance` must be set. "
                             f"Received: mean={mean} and variance={variance}")
        if mean is not None:
            if np.shape(mean) != np.shape(variance):
                raise ValueError("When setting values directly, `mean` and `variance` must have the same shape. "
                                 f"Received: mean shape {np.shape(mean)} and variance shape {np.shape(variance)}")
            if len(np.shape(mean)) > len(self.axis):
                raise ValueError(f"The rank of `mean` must be less than or equal to the number of axes "
                                 f"({len(self.axis)}). Received: mean shape {np.shape(mean)} for axis {self.axis}")
        self._input_shape = None
        self.mean = self.variance = None  # broadcastable to the inputs once built
        self._adapt_mean = self._adapt_variance = None
        self._count = 0  # Keras's "count" weight, which its adapt() leaves at 0

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        ndim = len(input_shape)
        if any(a < -ndim or a >= ndim for a in self.axis):
            raise ValueError(f"Normalization \"{self.name}\": all `axis` values must be in the range [-ndim, ndim). "
                             f"Received inputs with ndim={ndim}, while axis={self.axis}")
        self._input_shape = input_shape
        self._keep = tuple(sorted(a % ndim for a in self.axis))
        for d in self._keep:
            if input_shape[d] is None:
                raise ValueError(f"Normalization \"{self.name}\": all `axis` values to be kept must have a known "
                                 f"shape. Received axis={self.axis}, inputs.shape={input_shape}, with unknown axis "
                                 f"at index {d}")
        self._reduce = tuple(d for d in range(ndim) if d not in self._keep)
        self._broadcast = [input_shape[d] if d in self._keep else 1 for d in range(ndim)]
        stats_shape = tuple(input_shape[d] for d in self._keep)
        if self.input_mean is None:
            self._adapt_mean = np.zeros(stats_shape, np.float32)
            self._adapt_variance = np.ones(stats_shape, np.float32)
            self._finalize()
        else:
            mean = np.asarray(self.input_mean, np.float32)
            variance = np.asarray(self.input_variance, np.float32)
            if mean.ndim:
                # The given statistics fill the last kept axes (Keras's reshape).
                expanded = [1] * ndim
                for i in range(1, mean.ndim + 1):
                    expanded[self._keep[-i]] = mean.shape[-i]
                mean, variance = mean.reshape(expanded), variance.reshape(expanded)
            self.mean = np.broadcast_to(mean, self._broadcast).astype(np.float32)
            self.variance = np.broadcast_to(variance, self._broadcast).astype(np.float32)
        self._built = True

    def _finalize(self):
        self.mean = self._adapt_mean.reshape(self._broadcast).astype(np.float32)
        self.variance = self._adapt_variance.reshape(self._broadcast).astype(np.float32)

    def adapt(self, data):
        """Learns mean and variance: from an array at once, or batch by batch from a Dataset
        (one of unbatched rows is batched by 128, as Keras does) or an iterable (list) of batches."""
        owner = f'Normalization "{self.name}"'
        if self.input_mean is not None:
            raise ValueError(f"{owner}: adapt() cannot change the mean and variance given to the layer")
        single = isinstance(data, np.ndarray) or hasattr(data, "numpy")  # a list is batches, as in Keras
        if not single and hasattr(data, "element_spec") and hasattr(data, "batch"):
            spec = data.element_spec
            spec = spec[0] if isinstance(spec, tuple) else spec
            if len(spec.shape) == 1:
                data = data.batch(128)
        batches = iter(batches_of(data, owner, lists_are_batches=True))
        first = next(batches, None)
        if first is None:
            raise ValueError(f"{owner}: adapt() received no data (an empty iterable)")
        if not self._built:
            self.build(first.shape)
        elif any(first.shape[d] != self._input_shape[d] for d in self._keep):
            raise ValueError(f"{owner}: the layer was built with input_shape={self._input_shape}, but adapt() is "
                             f"being called with data with an incompatible shape, data.shape={first.shape}")
        if single:
            mean, var = np.mean(first, axis=self._reduce), np.var(first, axis=self._reduce)
        else:
            # Keras's running combination of per-batch mean and variance, in float32.
            mean = np.zeros(self._adapt_mean.shape, np.float32)
            var = np.zeros(self._adapt_mean.shape, np.float32)
            count = 0
            for batch in [first, *batches]:
                batch = batch.astype(np.float32)
                if any(batch.shape[d] != self._input_shape[d] for d in self._keep):
                    raise ValueError(f"{owner}: adapt() yielded a batch with incompatible shape. Expected "
                                     f"{self._input_shape}, got {batch.shape}.")
                batch_mean, batch_var = np.mean(batch, axis=self._reduce), np.var(batch, axis=self._reduce)
                batch_count = int(np.prod([batch.shape[d] for d in self._reduce], dtype=np.int64))
                count += batch_count
                w = np.float32(batch_count / count)
                new_mean = mean * (1 - w) + batch_mean * w
                var = (var + (mean - new_mean) ** 2) * (1 - w) + (batch_var + (batch_mean - new_mean) ** 2) * w
                mean = new_mean
        self._adapt_mean = np.asarray(mean, np.float32)
        self._adapt_variance = np.asarray(var, np.float32)
        self._finalize()

    def _compute(self, x, training):
        if self.mean is None:
            raise ValueError(f'Normalization "{self.name}": You must call `.build(input_shape)` on the layer before '
                             "using it.")
        x = x.astype(np.float32)
        std = np.maximum(np.sqrt(self.variance), np.float32(_EPSILON))
        return self.mean + x * std if self.invert else (x - self.mean) / std

    def get_weights(self):
        if self.input_mean is not None or not self._built:
            return []
        return [self._adapt_mean.copy(), self._adapt_variance.copy(), np.int64(self._count)]

    def set_weights(self, weights):
        weights = list(weights)
        if len(weights) != len(self.get_weights()):
            raise ValueError(f'Normalization "{self.name}": expected {len(self.get_weights())} weights (mean, '
                             f"variance, count), got {len(weights)}")
        if weights:
            self._adapt_mean = np.asarray(weights[0], np.float32).reshape(self._adapt_mean.shape)
            self._adapt_variance = np.asarray(weights[1], np.float32).reshape(self._adapt_variance.shape)
            self._count = int(weights[2])
            self._finalize()

    def _config(self):
        def listed(v):
            return None if v is None else np.asarray(v).tolist()

        return {"axis": self.axis, "invert": self.invert, "mean": listed(self.input_mean),
                "variance": listed(self.input_variance)}


PREPROCESSING_CLASSES["Normalization"] = Normalization
