"""keras.losses: configuration objects whose math runs in C++ (callable for a direct value)."""
import json

import numpy as np

from mdtrain import _core
from mdtrain.keras._data_adapter import to_int32


class Loss:
    _class_name = None

    def __init__(self, reduction="sum_over_batch_size", name=None, **config):
        self.reduction = _check_reduction(reduction, type(self).__name__)
        self._config = config
        self.name = name
        self._core = _core.loss_from_config(json.dumps({"class_name": self._class_name, "config": config}))
        if self.name is None:
            self.name = self._core.name

    def get_config(self):
        return dict(self._config, name=self.name, reduction=self.reduction)

    def __call__(self, y_true, y_pred, sample_weight=None):
        """The loss of a batch, reduced as `reduction` says: the mean over the batch
        ("sum_over_batch_size"), the sum ("sum"), or one value per example (None / "none",
        shape y_pred.shape[:-1])."""
        from mdtrain._eager import keras_losses

        if keras_losses.is_eager_value(y_true) or keras_losses.is_eager_value(y_pred):
            # Tensors in, a tensor out, differentiable by GradientTape (docs/eager.md).
            return keras_losses.call_loss(self, y_true, y_pred, sample_weight)
        if sample_weight is not None:
            raise NotImplementedError("sample_weight is not supported yet (except on tensors)")
        y_true, y_pred = _labels(y_true), np.ascontiguousarray(y_pred, dtype=np.float32)
        reduction = getattr(self, "reduction", "sum_over_batch_size")
        if reduction is None:
            return self._core.per_sample(y_true, y_pred).astype(np.float32)
        if reduction == "sum":
            return np.float32(self._core.sum(y_true, y_pred))
        return np.float32(self._core(y_true, y_pred))

    def __repr__(self):
        return f"{type(self).__name__}({self._config})"


_REDUCTIONS = ("sum_over_batch_size", "sum", None)


class Reduction:
    """tf.keras.losses.Reduction (TF's legacy names, still in tf.keras): the reduction strings."""

    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"

    @classmethod
    def all(cls):
        return (cls.AUTO, cls.NONE, cls.SUM, cls.SUM_OVER_BATCH_SIZE)

    @classmethod
    def validate(cls, key):
        if key not in cls.all():
            raise ValueError(f"Invalid Reduction Key: {key}. Expected keys are \"{cls.all()}\"")


def _check_reduction(reduction, owner):
    """Keras 3's reductions ("auto" is "sum_over_batch_size", "none" is None); anything else is a
    ValueError, never a silent mean."""
    if reduction == "auto":
        return "sum_over_batch_size"
    if reduction == "none":
        return None
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{owner}: reduction must be one of 'sum_over_batch_size', 'sum', None or 'none', got "
                         f"{reduction!r}")
    return reduction


def _labels(y):
    y = np.asarray(y)
    if y.dtype.kind in "iub":
        return to_int32(y, "y_true")
    return np.ascontiguousarray(y, dtype=np.float32)


class SparseCategoricalCrossentropy(Loss):
    _class_name = "SparseCategoricalCrossentropy"

    def __init__(self, from_logits=False, ignore_class=None, reduction="sum_over_batch_size",
                 name="sparse_categorical_crossentropy"):
        super().__init__(reduction, name, from_logits=bool(from_logits), ignore_class=ignore_class)
        self.from_logits = bool(from_logits)


class CategoricalCrossentropy(Loss):
    _class_name = "CategoricalCrossentropy"

    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1, reduction="sum_over_batch_size",
                 name="categorical_crossentropy"):
        if axis != -1:
            raise NotImplementedError("CategoricalCrossentropy: only axis=-1 is supported")
        super().__init__(reduction, name, from_logits=bool(from_logits), label_smoothing=float(label_smoothing))
        self.from_logits = bool(from_logits)


class BinaryCrossentropy(Loss):
    _class_name = "BinaryCrossentropy"

    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1, reduction="sum_over_batch_size",
                 name="binary_crossentropy"):
        if axis != -1:
            raise NotImplementedError("BinaryCrossentropy: only axis=-1 is supported")
        super().__init__(reduction, name, from_logits=bool(from_logits), label_smoothing=float(label_smoothing))
        self.from_logits = bool(from_logits)


class MeanSquaredError(Loss):
    _class_name = "MeanSquaredError"

    def __init__(self, reduction="sum_over_batch_size", name="mean_squared_error"):
        super().__init__(reduction, name)


class MeanAbsoluteError(Loss):
    _class_name = "MeanAbsoluteError"

    def __init__(self, reduction="sum_over_batch_size", name="mean_absolute_error"):
        super().__init__(reduction, name)


def get(identifier):
    """A Loss from a Keras name or alias ('sparse_categorical_crossentropy', 'mse', ...) or a Loss."""
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str):
        return _from_config_json(_core.make_loss(identifier).config_json())  # unknown names: ValueError
    raise TypeError(f"loss must be a name such as 'sparse_categorical_crossentropy' or a keras Loss, got {identifier!r}")


def _from_config_json(config_json):
    """A Loss around the C++ loss a saved model was compiled with (its settings preserved)."""
    loss = Loss.__new__(Loss)
    loss._core = _core.loss_from_config(config_json)
    loss._config = json.loads(loss._core.config_json())
    loss.name = loss._core.name
    loss.reduction = "sum_over_batch_size"
    return loss


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False):
    return SparseCategoricalCrossentropy(from_logits=from_logits)(y_true, y_pred)


def categorical_crossentropy(y_true, y_pred, from_logits=False):
    return CategoricalCrossentropy(from_logits=from_logits)(y_true, y_pred)


def binary_crossentropy(y_true, y_pred, from_logits=False):
    return BinaryCrossentropy(from_logits=from_logits)(y_true, y_pred)


def mean_squared_error(y_true, y_pred):
    return MeanSquaredError()(y_true, y_pred)


def mean_absolute_error(y_true, y_pred):
    return MeanAbsoluteError()(y_true, y_pred)


mse = MSE = mean_squared_error
mae = MAE = mean_absolute_error
