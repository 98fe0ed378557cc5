"""keras.metrics: stateful metrics computed in C++; also accepted by name in compile()."""
import numpy as np

from mdtrain import _core
from mdtrain.keras.losses import _labels


def _check_dtype(dtype, cls_name):
    """Metrics accumulate in float64 and report float32, as Keras's default dtype; another dtype is
    refused rather than ignored (issue 34)."""
    if dtype not in (None, "float32", np.float32):
        raise NotImplementedError(f"{cls_name}: dtype={dtype!r} is not supported (metrics are float32)")


class Metric:
    """A metric with Keras's update_state / result / reset_state protocol."""

    _identifier = None
    _direction = "up"

    def __init__(self, name=None, dtype=None):
        _check_dtype(dtype, type(self).__name__)
        self.name = name or self._identifier
        self._core = None

    def _ensure(self, y_true, y_pred):
        if self._core is None:
            self._core = _core.make_metric(self._identifier, list(np.shape(y_true)), list(np.shape(y_pred)))

    def update_state(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            raise NotImplementedError("sample_weight is not supported yet")
        if getattr(y_pred, "_keras_mask", None) is not None:
            # Keras weights a metric by the mask y_pred carries; counting the padding would be a
            # silently different value.
            raise NotImplementedError(f"{type(self).__name__} '{self.name}': y_pred carries a mask (the output of a "
                                      "masked model called directly); metrics called by hand do not leave masked "
                                      "steps out yet (fit and evaluate do)")
        y_true, y_pred = _labels(y_true), np.ascontiguousarray(y_pred, dtype=np.float32)
        self._ensure(y_true, y_pred)
        self._core.update(y_true, y_pred)

    def result(self):
        """The metric's value as a float32 scalar tensor (float(), .numpy(), NumPy all accept it)."""
        from mdtrain._eager.tensor import wrap

        return wrap(np.asarray(self._core.result() if self._core is not None else 0.0, dtype=np.float32))

    def reset_state(self):
        if self._core is not None:
            self._core.reset()

    def __call__(self, y_true, y_pred, sample_weight=None):
        self.update_state(y_true, y_pred, sample_weight)
        return self.result()

    def get_config(self):
        return {"name": self.name}


class Mean(Metric):
    _identifier = "mean"

    def __init__(self, name="mean", dtype=None):
        super().__init__(name, dtype)
        self._core = _core.Mean(self.name)

    def update_state(self, values, sample_weight=None):
        values = np.asarray(values, dtype=np.float64).ravel()
        weights = np.ones_like(values) if sample_weight is None else np.broadcast_to(
            np.asarray(sample_weight, dtype=np.float64), values.shape).ravel()
        for v, w in zip(values, weights):
            self._core.update_value(float(v), float(w))


def _metric_class(class_name, identifier, direction="up"):
    def __init__(self, name=identifier, dtype=None):
        Metric.__init__(self, name, dtype)
        self._identifier = identifier

    return type(class_name, (Metric,), {"__init__": __init__, "_identifier": identifier, "_direction": direction})


Accuracy = _metric_class("Accuracy", "accuracy")
SparseCategoricalAccuracy = _metric_class("SparseCategoricalAccuracy", "sparse_categorical_accuracy")
CategoricalAccuracy = _metric_class("CategoricalAccuracy", "categorical_accuracy")
BinaryAccuracy = _metric_class("BinaryAccuracy", "binary_accuracy")
MeanSquaredError = _metric_class("MeanSquaredError", "mean_squared_error", "down")
MeanAbsoluteError = _metric_class("MeanAbsoluteError", "mean_absolute_error", "down")


def _metric_identifier(metric):
    """compile(metrics=[...]) accepts names and Metric objects; the core resolves names."""
    if isinstance(metric, str):
        return metric
    if isinstance(metric, Metric) and metric._identifier and not isinstance(metric, Mean):
        return metric._identifier
    raise TypeError(f"metrics must be names such as 'accuracy' or keras.metrics objects, got {metric!r}")
