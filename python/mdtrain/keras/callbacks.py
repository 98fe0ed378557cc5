"""Keras callbacks: hooks the training loop calls between steps and epochs.

The protocol, names, defaults and printed formats follow Keras 3
(``keras.callbacks``). Deliberate differences are listed in docs/callbacks.md.

This module depends on numpy and the standard library only (plus the progress
bar next to it), so it works without the compiled core.
"""

import csv
import inspect
import json
import math
import os
import sys
import warnings

import numpy as np

from .utils.progbar import Progbar

__all__ = [
    "TensorBoard",
    "Callback",
    "CallbackList",
    "History",
    "ProgbarLogger",
    "EarlyStopping",
    "ModelCheckpoint",
    "TerminateOnNaN",
    "LambdaCallback",
    "CSVLogger",
    "ReduceLROnPlateau",
    "LearningRateScheduler",
]


def _print_msg(message):
    # Resolve sys.stdout per call: notebooks and pytest's capsys replace it.
    stream = sys.stdout
    stream.write(message + "\n")
    stream.flush()


def _default_hook(fn):
    """Marks a base-class hook as a no-op, so the loop can tell which hooks a
    callback really implements and skip per-batch calls nobody listens to."""
    fn._mdtrain_default_hook = True
    return fn


def _implements(callback, hook_names):
    for name in hook_names:
        hook = getattr(callback, name, None)
        if hook is not None and not getattr(hook, "_mdtrain_default_hook", False):
            return True
    return False


_TRAIN_BATCH_HOOKS = ("on_batch_begin", "on_batch_end", "on_train_batch_begin", "on_train_batch_end")
_TEST_BATCH_HOOKS = ("on_test_batch_begin", "on_test_batch_end")
_PREDICT_BATCH_HOOKS = ("on_predict_batch_begin", "on_predict_batch_end")
_ALL_HOOKS = (
    "on_batch_begin",
    "on_batch_end",
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_test_batch_begin",
    "on_test_batch_end",
    "on_predict_batch_begin",
    "on_predict_batch_end",
    "on_train_begin",
    "on_train_end",
    "on_test_begin",
    "on_test_end",
    "on_predict_begin",
    "on_predict_end",
)


class Callback:
    """Base class of callbacks; override the hooks you need.

    Attributes:
        params: dict of training parameters (``verbose``, ``epochs``, ``steps``).
        model: the model being trained (set by ``set_model``).
    """

    # Class-level defaults keep subclasses that skip super().__init__() working.
    params = None
    _model = None

    def __init__(self):
        self.params = None
        self._model = None

    def set_params(self, params):
        self.params = params

    def set_model(self, model):
        self._model = model

    @property
    def model(self):
        return self._model

    # Which batch-level hooks are implemented; the fit loop asks (through
    # CallbackList.needs_batch_hooks) to avoid a Python call per step when no
    # callback listens. Override when a callback only sometimes listens.
    def _implements_train_batch_hooks(self):
        return _implements(self, _TRAIN_BATCH_HOOKS)

    def _implements_test_batch_hooks(self):
        return _implements(self, _TEST_BATCH_HOOKS)

    def _implements_predict_batch_hooks(self):
        return _implements(self, _PREDICT_BATCH_HOOKS)

    @_default_hook
    def on_batch_begin(self, batch, logs=None):
        """Backwards-compatible alias of ``on_train_batch_begin``."""

    @_default_hook
    def on_batch_end(self, batch, logs=None):
        """Backwards-compatible alias of ``on_train_batch_end``."""

    @_default_hook
    def on_epoch_begin(self, epoch, logs=None):
        """Called at the start of an epoch (0-based ``epoch``) in ``fit``."""

    @_default_hook
    def on_epoch_end(self, epoch, logs=None):
        """Called at the end of an epoch; ``logs`` holds the epoch's metrics,
        validation ones prefixed with ``val_``."""

    @_default_hook
    def on_train_batch_begin(self, batch, logs=None):
        """Called before each training batch (0-based within the epoch)."""
        self.on_batch_begin(batch, logs=logs)

    @_default_hook
    def on_train_batch_end(self, batch, logs=None):
        """Called after each training batch; ``logs`` holds the running means
        of the epoch's metrics so far."""
        self.on_batch_end(batch, logs=logs)

    @_default_hook
    def on_test_batch_begin(self, batch, logs=None):
        """Called before each batch of ``evaluate`` (and of validation in ``fit``)."""

    @_default_hook
    def on_test_batch_end(self, batch, logs=None):
        """Called after each batch of ``evaluate`` (and of validation in ``fit``)."""

    @_default_hook
    def on_predict_batch_begin(self, batch, logs=None):
        """Called before each batch of ``predict``."""

    @_default_hook
    def on_predict_batch_end(self, batch, logs=None):
        """Called after each batch of ``predict``."""

    @_default_hook
    def on_train_begin(self, logs=None):
        """Called once at the start of ``fit``."""

    @_default_hook
    def on_train_end(self, logs=None):
        """Called once at the end of ``fit`` with the last epoch's logs."""

    @_default_hook
    def on_test_begin(self, logs=None):
        """Called at the start of ``evaluate`` or of a validation pass."""

    @_default_hook
    def on_test_end(self, logs=None):
        """Called at the end of ``evaluate`` or of a validation pass."""

    @_default_hook
    def on_predict_begin(self, logs=None):
        """Called at the start of ``predict``."""

    @_default_hook
    def on_predict_end(self, logs=None):
        """Called at the end of ``predict``."""


def _flatten_callbacks(callbacks):
    if callbacks is None:
        return []
    if isinstance(callbacks, Callback):
        return [callbacks]
    flat = []
    for item in callbacks:
        if isinstance(item, (list, tuple)):
            flat.extend(_flatten_callbacks(item))
        elif isinstance(item, Callback):
            flat.append(item)
        else:
            raise TypeError(
                "callbacks: every element must be a "
                "mdtrain.keras.callbacks.Callback instance; received "
                f"{type(item).__name__} ({item!r})."
            )
    return flat


def _logs_to_python(logs):
    """Flattens nested dicts, sorts keys and turns scalars into floats, as
    Keras does for batch logs (so the progress bar lists metrics in a stable,
    alphabetical order)."""
    result = {}
    for key, value in sorted(logs.items()):
        if isinstance(value, dict):
            result.update(_logs_to_python(value))
            continue
        try:
            value = float(value)
        except (TypeError, ValueError):
            pass
        result[key] = value
    return result


class CallbackList(Callback):
    """Calls a list of callbacks as one.

    Args:
        callbacks: a list (possibly nested) of ``Callback`` instances, or None.
        add_history: append a ``History`` unless the list already holds one.
        add_progbar: append a ``ProgbarLogger`` unless the list already holds one.
        model: the model, given to every callback with ``set_model``.
        **params: given to every callback with ``set_params``
            (``verbose``, ``epochs``, ``steps``).
    """

    def __init__(self, callbacks=None, add_history=False, add_progbar=False, model=None, **params):
        super().__init__()
        self.callbacks = _flatten_callbacks(callbacks)
        self._history = None
        self._progbar = None
        for callback in self.callbacks:
            if isinstance(callback, History):
                self._history = callback
            elif isinstance(callback, ProgbarLogger):
                self._progbar = callback
        if add_history and self._history is None:
            self._history = History()
            self.callbacks.append(self._history)
        if add_progbar and self._progbar is None:
            self._progbar = ProgbarLogger()
            self.callbacks.append(self._progbar)
        self.set_model(model)
        self.set_params(params)

    def set_model(self, model):
        if model is None:
            return
        super().set_model(model)
        if self._history is not None:
            model.history = self._history
        for callback in self.callbacks:
            callback.set_model(model)

    def set_params(self, params):
        self.params = params
        if params:
            for callback in self.callbacks:
                callback.set_params(params)

    def append(self, callback):
        """Adds a callback (or a list of them), giving it the list's model
        and params."""
        for added in _flatten_callbacks([callback]):
            self.callbacks.append(added)
            if self._model is not None:
                added.set_model(self._model)
            if self.params:
                added.set_params(self.params)

    def __iter__(self):
        return iter(self.callbacks)

    def needs_batch_hooks(self, mode="train"):
        """Whether any callback listens to per-batch hooks of ``mode``
        ("train", "test" or "predict"). When False, the loop may skip the
        ``on_*_batch_begin/end`` calls entirely. Ask after ``on_train_begin``
        / ``on_test_begin``: a ProgbarLogger ignores validation batches once
        training has begun."""
        checks = {
            "train": "_implements_train_batch_hooks",
            "test": "_implements_test_batch_hooks",
            "predict": "_implements_predict_batch_hooks",
        }
        if mode not in checks:
            raise ValueError(
                f"needs_batch_hooks: mode must be 'train', 'test' or 'predict'; received mode={mode!r}."
            )
        return any(getattr(callback, checks[mode])() for callback in self.callbacks)

    # Epoch and run hooks pass one logs dict to every callback in order, so a
    # callback that adds a key (e.g. ReduceLROnPlateau's "learning_rate") is
    # seen by those after it, History included.
    def on_epoch_begin(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_epoch_end(epoch, logs)

    def on_batch_begin(self, batch, logs=None):
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_batch_begin(batch, logs=logs)

    def on_batch_end(self, batch, logs=None):
        logs = _logs_to_python(logs or {})
        for callback in self.callbacks:
            callback.on_batch_end(batch, logs=logs)

    def on_train_batch_begin(self, batch, logs=None):
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_train_batch_begin(batch, logs=logs)

    def on_train_batch_end(self, batch, logs=None):
        logs = _logs_to_python(logs or {})
        for callback in self.callbacks:
            callback.on_train_batch_end(batch, logs=logs)

    def on_test_batch_begin(self, batch, logs=None):
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_test_batch_begin(batch, logs=logs)

    def on_test_batch_end(self, batch, logs=None):
        logs = _logs_to_python(logs or {})
        for callback in self.callbacks:
            callback.on_test_batch_end(batch, logs=logs)

    def on_predict_batch_begin(self, batch, logs=None):
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_predict_batch_begin(batch, logs=logs)

    def on_predict_batch_end(self, batch, logs=None):
        # Predict logs carry output arrays: passed through untouched.
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_predict_batch_end(batch, logs=logs)

    def on_train_begin(self, logs=None):
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_train_begin(logs)

    def on_train_end(self, logs=None):
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_train_end(logs)

    def on_test_begin(self, logs=None):
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_test_begin(logs)

    def on_test_end(self, logs=None):
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_test_end(logs)

    def on_predict_begin(self, logs=None):
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_predict_begin(logs)

    def on_predict_end(self, logs=None):
        logs = logs if logs is not None else {}
        for callback in self.callbacks:
            callback.on_predict_end(logs)


class History(Callback):
    """Records each epoch's logs; ``fit`` returns it.

    Attributes:
        history: dict metric name -> list of per-epoch values.
        epoch: list of the (0-based) epochs recorded by the last ``fit``.
    """

    def __init__(self):
        super().__init__()
        self.history = {}
        self.epoch = []

    def on_train_begin(self, logs=None):
        self.epoch = []

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self.epoch.append(epoch)
        for key, value in logs.items():
            self.history.setdefault(key, []).append(value)
        if self.model is not None:
            self.model.history = self


class ProgbarLogger(Callback):
    """Prints progress and metrics to stdout (added by ``fit`` unless
    ``verbose=0``). ``verbose=1`` redraws a bar; ``verbose=2`` prints one line
    per epoch. Validation inside ``fit`` is silent; its metrics appear on the
    epoch's final line."""

    def __init__(self):
        super().__init__()
        self.seen = 0
        self.progbar = None
        self.target = None
        self.verbose = 1
        self.epochs = 1
        self._called_in_fit = False

    def set_params(self, params):
        super().set_params(params)
        verbose = params.get("verbose", 1)
        if verbose == "auto":
            verbose = 1
        self.verbose = verbose
        self.epochs = params.get("epochs", 1)
        self.target = params.get("steps")

    # With verbose=2 and a known step count only the epoch end prints, so the
    # batch calls can be skipped.
    def _implements_train_batch_hooks(self):
        return self.verbose == 1 or (self.verbose == 2 and self.target is None)

    def _implements_test_batch_hooks(self):
        return not self._called_in_fit and self._implements_train_batch_hooks()

    def _implements_predict_batch_hooks(self):
        return self._implements_train_batch_hooks()

    def on_train_begin(self, logs=None):
        self._called_in_fit = True

    def on_train_end(self, logs=None):
        # Let a later evaluate()/predict() with this same logger print again.
        self._called_in_fit = False

    def on_test_begin(self, logs=None):
        if not self._called_in_fit:
            self._reset_progbar()
            self._maybe_init_progbar()

    def on_predict_begin(self, logs=None):
        self._reset_progbar()
        self._maybe_init_progbar()

    def on_epoch_begin(self, epoch, logs=None):
        self._reset_progbar()
        self._maybe_init_progbar()
        if self.verbose and self.epochs > 1:
            _print_msg(f"Epoch {epoch + 1}/{self.epochs}")

    def on_train_batch_end(self, batch, logs=None):
        self._update_progbar(batch, logs)

    def on_test_batch_end(self, batch, logs=None):
        if not self._called_in_fit:
            self._update_progbar(batch, logs)

    def on_predict_batch_end(self, batch, logs=None):
        # Predict logs are model outputs, not metrics.
        self._update_progbar(batch, None)

    def on_epoch_end(self, epoch, logs=None):
        self._finalize_progbar(logs)

    def on_test_end(self, logs=None):
        if not self._called_in_fit:
            self._finalize_progbar(logs)

    def on_predict_end(self, logs=None):
        self._finalize_progbar(logs)

    def _reset_progbar(self):
        self.seen = 0
        self.progbar = None

    def _maybe_init_progbar(self):
        if self.progbar is None:
            # Logs are already running means over the epoch: show them as
            # given rather than averaging them again.
            self.progbar = Progbar(
                target=self.target,
                verbose=self.verbose,
                stateless_metrics=(),
                unit_name="step",
            )

    def _update_progbar(self, batch, logs):
        self._maybe_init_progbar()
        self.seen = batch + 1
        if self.verbose == 1:
            self.progbar.update(self.seen, list((logs or {}).items()), finalize=False)

    def _finalize_progbar(self, logs):
        self._maybe_init_progbar()
        if self.target is None:
            self.target = self.seen
            self.progbar.target = self.target
        # Sorted, so verbose=2 lists metrics in the same order as verbose=1.
        self.progbar.update(self.target, sorted((logs or {}).items()), finalize=True)


# Substrings of metric names Keras metrics maximize / minimize.
_MAXIMIZED_NAMES = (
    "acc",
    "auc",
    "precision",
    "recall",
    "f1",
    "fbeta",
    "iou",
    "cosine_similarity",
    "r2_score",
    "true_positives",
    "true_negatives",
    "sensitivity",
    "specificity",
)
_MINIMIZED_NAMES = (
    "loss",
    "error",
    "mse",
    "mae",
    "mape",
    "msle",
    "crossentropy",
    "hinge",
    "divergence",
    "poisson",
    "logcosh",
    "log_cosh",
    "false_positives",
    "false_negatives",
)


def _model_metric_direction(model, name):
    """"up"/"down" from a compiled metric object named ``name``, if the model
    exposes one with a direction (as Keras 3 metrics do)."""
    pending = list(getattr(model, "metrics", None) or ())
    while pending:
        metric = pending.pop(0)
        inner = getattr(metric, "metrics", None)
        if isinstance(inner, (list, tuple)):
            pending.extend(inner)
        if getattr(metric, "name", None) != name:
            continue
        direction = getattr(metric, "_direction", None) or getattr(metric, "direction", None)
        if direction in ("up", "down"):
            return direction
    return None


def _infer_maximize(owner, monitor, model):
    """Whether ``monitor`` improves upwards, for ``mode="auto"``."""
    name = monitor[4:] if monitor.startswith("val_") else monitor
    if name.endswith("loss"):
        return False
    direction = _model_metric_direction(model, name) if model is not None else None
    if direction is not None:
        return direction == "up"
    if any(token in name for token in _MAXIMIZED_NAMES):
        return True
    if any(token in name for token in _MINIMIZED_NAMES):
        return False
    raise ValueError(
        f"{owner} callback received monitor={monitor!r}, but cannot tell "
        "whether that metric should be maximized or minimized. Pass "
        "mode='max' to use the highest value, or mode='min' to use the lowest."
    )


class _MonitorCallback(Callback):
    """Shared logic of callbacks that watch one logged quantity."""

    def __init__(self, monitor="val_loss", mode="auto", baseline=None, min_delta=0):
        super().__init__()
        if mode not in ("auto", "min", "max"):
            # Keras warns and falls back to "auto"; a typo should not silently
            # flip the direction being optimised.
            raise ValueError(
                f"{type(self).__name__}: mode must be one of 'auto', 'min', "
                f"'max'; received mode={mode!r}."
            )
        self.monitor = monitor
        self.mode = mode
        self.best = baseline
        self.min_delta = abs(min_delta)
        self.monitor_op = None
        self._maximize = None

    def _set_monitor_op(self):
        if self.mode == "max":
            self._maximize = True
        elif self.mode == "min":
            self._maximize = False
        else:
            self._maximize = _infer_maximize(type(self).__name__, self.monitor, self.model)
        self.monitor_op = np.greater if self._maximize else np.less
        if self.best is None:
            self.best = -np.inf if self._maximize else np.inf

    def _is_improvement(self, value, reference):
        if reference is None:
            return True
        if self._maximize:
            return bool(value - self.min_delta > reference)
        return bool(value + self.min_delta < reference)


def _snapshot_weights(weights):
    # get_weights may hand out views of live parameters; a "best" snapshot
    # must not change as training goes on.
    if isinstance(weights, (list, tuple)):
        return [np.array(w, copy=True) if isinstance(w, np.ndarray) else w for w in weights]
    return weights


class EarlyStopping(_MonitorCallback):
    """Stops training when a monitored quantity has stopped improving.

    Args:
        monitor: quantity to watch in the epoch logs.
        min_delta: a change smaller than this is not an improvement.
        patience: epochs without improvement after which training stops.
        verbose: 1 prints a message when stopping / restoring.
        mode: "min", "max" or "auto" (direction inferred from the name).
        baseline: the counter of epochs without improvement only restarts on
            epochs that also beat this value.
        restore_best_weights: at the end of training, set the weights of the
            best epoch.
        start_from_epoch: epochs of warm-up before monitoring starts.
    """

    def __init__(
        self,
        monitor="val_loss",
        min_delta=0,
        patience=0,
        verbose=0,
        mode="auto",
        baseline=None,
        restore_best_weights=False,
        start_from_epoch=0,
    ):
        super().__init__(monitor, mode, baseline=None, min_delta=min_delta)
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.restore_best_weights = restore_best_weights
        self.start_from_epoch = start_from_epoch
        self.wait = 0
        self.stopped_epoch = 0
        self.best_weights = None
        self.best_epoch = 0

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best_weights = None
        self.best_epoch = 0
        # Resolve "auto" now: an ambiguous monitor fails before any epoch runs.
        self._set_monitor_op()
        # No best yet: the first monitored epoch is always an improvement.
        self.best = None

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor_op is None:
            self._set_monitor_op()
            self.best = None
        current = self.get_monitor_value(logs)
        if current is None or epoch < self.start_from_epoch:
            return

        self.wait += 1
        if self._is_improvement(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = _snapshot_weights(self.model.get_weights())
            # The wait only restarts when the baseline is beaten too.
            if self.baseline is None or self._is_improvement(current, self.baseline):
                self.wait = 0
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = _snapshot_weights(self.model.get_weights())
            self.best_epoch = epoch

        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose > 0:
            _print_msg(f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose > 0:
                _print_msg(
                    "Restoring model weights from the end of the best epoch: "
                    f"{self.best_epoch + 1}."
                )
            self.model.set_weights(self.best_weights)

    def get_monitor_value(self, logs):
        logs = logs or {}
        value = logs.get(self.monitor)
        if value is None:
            warnings.warn(
                f"Early stopping conditioned on metric `{self.monitor}` which "
                f"is not available. Available metrics are: {','.join(logs.keys())}",
                stacklevel=2,
            )
        return value


class ModelCheckpoint(_MonitorCallback):
    """Saves the model (or its weights) during training.

    Args:
        filepath: path, may hold ``str.format`` fields filled with ``epoch``
            (1-based), ``batch`` (1-based, batch-frequency saves) and the logs,
            e.g. ``"ckpt-{epoch:02d}-{val_loss:.2f}.keras"``.
        monitor: quantity compared when ``save_best_only``.
        verbose: 1 prints a message for each decision.
        save_best_only: save only when ``monitor`` improves.
        save_weights_only: call ``model.save_weights(path)`` instead of
            ``model.save(path)``.
        mode: "min", "max" or "auto".
        save_freq: "epoch", or an integer N to save every N training batches.
        initial_value_threshold: the value to beat for the first save when
            ``save_best_only``.

    The callback never deletes a file: a new checkpoint replaces an old one only
    through the model's own (atomic) save.
    """

    def __init__(
        self,
        filepath,
        monitor="val_loss",
        verbose=0,
        save_best_only=False,
        save_weights_only=False,
        mode="auto",
        save_freq="epoch",
        initial_value_threshold=None,
    ):
        super().__init__(monitor, mode, baseline=initial_value_threshold)
        self.filepath = os.fspath(filepath)
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        if save_freq != "epoch" and (
            isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1
        ):
            raise ValueError(
                "ModelCheckpoint: save_freq must be 'epoch' or a positive "
                f"integer number of batches; received save_freq={save_freq!r}."
            )
        self.save_freq = save_freq
        self._batches_seen_since_last_saving = 0
        self._last_batch_seen = 0
        self._current_epoch = 0

    def on_train_begin(self, logs=None):
        if self.save_best_only and self.monitor_op is None:
            self._set_monitor_op()

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self._should_save_on_batch(batch):
            self._save_model(epoch=self._current_epoch, batch=batch, logs=logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.save_freq == "epoch":
            self._save_model(epoch=epoch, batch=None, logs=logs)

    def _implements_train_batch_hooks(self):
        return self.save_freq != "epoch"

    def _should_save_on_batch(self, batch):
        if self.save_freq == "epoch":
            return False
        # Batch indices restart each epoch; count batches across epochs.
        if batch <= self._last_batch_seen:
            new_batches = batch + 1
        else:
            new_batches = batch - self._last_batch_seen
        self._batches_seen_since_last_saving += new_batches
        self._last_batch_seen = batch
        if self._batches_seen_since_last_saving >= self.save_freq:
            self._batches_seen_since_last_saving = 0
            return True
        return False

    def _get_file_path(self, epoch, batch, logs):
        try:
            if batch is None or "batch" in logs:
                return self.filepath.format(epoch=epoch + 1, **logs)
            return self.filepath.format(epoch=epoch + 1, batch=batch + 1, **logs)
        except KeyError as e:
            raise KeyError(
                f'ModelCheckpoint: failed to format filepath "{self.filepath}": '
                f"no value for {e} in the logs (available: {', '.join(logs)})."
            ) from None

    def _should_save(self, epoch, logs, filepath):
        if not self.save_best_only:
            if self.verbose > 0:
                _print_msg(f"\nEpoch {epoch + 1}: saving model to {filepath}")
            return True
        if self.monitor_op is None:
            self._set_monitor_op()
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(
                f"Can save best model only with {self.monitor} available.",
                stacklevel=3,
            )
            return True
        if isinstance(current, np.ndarray) and current.ndim > 0:
            warnings.warn(
                "Can save best model only when `monitor` is a scalar value. "
                f"Received: {current}. Falling back to `save_best_only=False`.",
                stacklevel=3,
            )
            return True
        best_str = "None" if self.best is None else f"{self.best:.5f}"
        if self._is_improvement(current, self.best):
            if self.verbose > 0:
                _print_msg(
                    f"\nEpoch {epoch + 1}: {self.monitor} improved from "
                    f"{best_str} to {current:.5f}, saving model to {filepath}"
                )
            self.best = current
            return True
        if self.verbose > 0:
            _print_msg(f"\nEpoch {epoch + 1}: {self.monitor} did not improve from {best_str}")
        return False

    def _save_model(self, epoch, batch, logs):
        if batch is not None:
            _gather_stages(self.model)  # before any worker may decide to skip: a collective
        logs = logs or {}
        filepath = self._get_file_path(epoch, batch, logs)
        if not self._should_save(epoch, logs, filepath):
            return
        if os.path.isdir(filepath):
            raise IsADirectoryError(
                "ModelCheckpoint: filepath must name a file, but it is an "
                f"existing directory: {filepath}"
            )
        if not _is_chief(self.model):
            return  # in a multi-worker job only worker 0 writes
        dirname = os.path.dirname(filepath)
        if dirname:
            os.makedirs(dirname, exist_ok=True)
        if self.save_weights_only:
            self.model.save_weights(filepath)
        else:
            self.model.save(filepath)
        if self.verbose > 0:
            _print_msg(f"\nEpoch {epoch + 1}: finished saving model to {filepath}")


class TerminateOnNaN(Callback):
    """Stops training when a batch's loss is NaN or infinite.

    Args:
        raise_error: raise RuntimeError at once instead of setting
            ``model.stop_training`` (which still runs ``on_train_end``).
    """

    def __init__(self, raise_error=False):
        super().__init__()
        self.raise_error = raise_error

    def on_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None:
            return
        # math.isfinite is several times cheaper than numpy on a float,
        # and this runs after every batch.
        finite = math.isfinite(loss) if isinstance(loss, float) else bool(np.all(np.isfinite(loss)))
        if not finite:
            if self.raise_error:
                raise RuntimeError(
                    f"NaN or Inf loss encountered at batch {batch}. Loss value: "
                    f"{loss}. Terminating training immediately."
                )
            _print_msg(f"Batch {batch}: Invalid loss, terminating training")
            self.model.stop_training = True


class LambdaCallback(Callback):
    """A callback built from plain functions.

    ``on_epoch_begin``/``on_epoch_end`` take ``(epoch, logs)``,
    ``on_train_begin``/``on_train_end`` take ``(logs)``, the batch hooks take
    ``(batch, logs)``. Any other hook of ``Callback`` can be given by name in
    ``kwargs``.
    """

    def __init__(
        self,
        on_epoch_begin=None,
        on_epoch_end=None,
        on_train_begin=None,
        on_train_end=None,
        on_train_batch_begin=None,
        on_train_batch_end=None,
        **kwargs,
    ):
        super().__init__()
        unknown = sorted(k for k in kwargs if k not in _ALL_HOOKS)
        if unknown:
            # Keras would store these silently; a misspelt hook never firing
            # is a bug that is hard to see.
            raise TypeError(
                f"LambdaCallback: unknown hook name(s) {', '.join(unknown)}; "
                f"valid hooks are {', '.join(_ALL_HOOKS)}."
            )
        given = dict(
            on_epoch_begin=on_epoch_begin,
            on_epoch_end=on_epoch_end,
            on_train_begin=on_train_begin,
            on_train_end=on_train_end,
            on_train_batch_begin=on_train_batch_begin,
            on_train_batch_end=on_train_batch_end,
            **kwargs,
        )
        for name, fn in given.items():
            if fn is not None:
                setattr(self, name, fn)


class CSVLogger(Callback):
    """Streams epoch results to a CSV file: a header ``epoch,<sorted keys>``,
    then one row per epoch (0-based), flushed at each epoch end.

    Args:
        filename: path of the CSV file.
        separator: field separator.
        append: append to an existing file (no second header) instead of
            overwriting it.
    """

    def __init__(self, filename, separator=",", append=False):
        super().__init__()
        self.sep = separator
        self.filename = os.fspath(filename)
        self.append = append
        self.writer = None
        self.keys = None
        self.append_header = True
        self.csv_file = None

    def on_train_begin(self, logs=None):
        self.append_header = True
        if not _is_chief(self.model):
            self.csv_file = None  # in a multi-worker job only worker 0 writes
            return
        if self.append:
            if os.path.exists(self.filename):
                with open(self.filename, "r") as f:
                    self.append_header = not f.readline()
            mode = "a"
        else:
            mode = "w"
        if self.csv_file is not None and not self.csv_file.closed:
            self.csv_file.close()
        self.csv_file = open(self.filename, mode, newline="")
        self.writer = None
        self.keys = None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.csv_file is None:
            return
        if self.keys is None:
            self.keys = sorted(logs.keys())
            # A model that will validate later gets its val_ columns now, so
            # the header does not change mid-file.
            for name in getattr(self.model, "metrics_names", None) or ():
                if name.startswith("val_") and name not in self.keys:
                    self.keys.append(name)
        if self.writer is None:
            self.writer = csv.writer(self.csv_file, delimiter=self.sep, lineterminator="\n")
            if self.append_header:
                self.writer.writerow(["epoch"] + self.keys)
        self.writer.writerow([epoch] + [_csv_value(logs.get(key, "NA")) for key in self.keys])
        self.csv_file.flush()

    def on_train_end(self, logs=None):
        if self.csv_file is not None and not self.csv_file.closed:
            self.csv_file.close()
        self.writer = None


def _csv_value(value):
    if isinstance(value, str):
        return value
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    if isinstance(value, (list, tuple, np.ndarray)):
        return "[" + ", ".join(map(str, value)) + "]"
    return value


def _get_learning_rate(optimizer):
    if not hasattr(optimizer, "learning_rate"):
        raise ValueError('Optimizer must have a "learning_rate" attribute.')
    return float(optimizer.learning_rate)


class ReduceLROnPlateau(Callback):
    """Multiplies the learning rate by ``factor`` after ``patience`` epochs
    without improvement of ``monitor``; adds ``learning_rate`` to the epoch logs.

    Args:
        monitor: quantity to watch.
        factor: new_lr = lr * factor (must be < 1).
        patience: epochs without improvement before reducing.
        verbose: 1 prints a message on each reduction.
        mode: "min", "max" or "auto" ("auto" falls back to "min" for names it
            cannot classify, as Keras).
        min_delta: threshold for a new optimum.
        cooldown: epochs to wait after a reduction before counting again.
        min_lr: lower bound of the learning rate.
    """

    def __init__(
        self,
        monitor="val_loss",
        factor=0.1,
        patience=10,
        verbose=0,
        mode="auto",
        min_delta=1e-4,
        cooldown=0,
        min_lr=0.0,
    ):
        super().__init__()
        if factor >= 1.0:
            raise ValueError(
                f"ReduceLROnPlateau does not support a factor >= 1.0. Received factor={factor}"
            )
        if mode not in ("auto", "min", "max"):
            raise ValueError(
                f"ReduceLROnPlateau: mode must be one of 'auto', 'min', 'max'; received mode={mode!r}."
            )
        self.monitor = monitor
        self.factor = factor
        self.min_lr = min_lr
        self.min_delta = min_delta
        self.patience = patience
        self.verbose = verbose
        self.cooldown = cooldown
        self.mode = mode
        self.cooldown_counter = 0
        self.wait = 0
        self.best = 0
        self._maximize = None
        self._reset()

    def _reset(self):
        if self.mode == "auto":
            try:
                self._maximize = _infer_maximize("ReduceLROnPlateau", self.monitor, self.model)
            except ValueError:
                self._maximize = False
        else:
            self._maximize = self.mode == "max"
        self.best = -np.inf if self._maximize else np.inf
        self.cooldown_counter = 0
        self.wait = 0

    def _improved(self, current):
        if self._maximize:
            return bool(current > self.best + self.min_delta)
        return bool(current < self.best - self.min_delta)

    def in_cooldown(self):
        return self.cooldown_counter > 0

    def on_train_begin(self, logs=None):
        self._reset()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        logs["learning_rate"] = _get_learning_rate(self.model.optimizer)
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(
                f"Learning rate reduction is conditioned on metric `{self.monitor}` "
                f"which is not available. Available metrics are: {','.join(logs.keys())}.",
                stacklevel=2,
            )
            return
        if self.in_cooldown():
            self.cooldown_counter -= 1
            self.wait = 0
        if self._improved(current):
            self.best = current
            self.wait = 0
        elif not self.in_cooldown():
            self.wait += 1
            if self.wait >= self.patience:
                old_lr = _get_learning_rate(self.model.optimizer)
                # Compare in float32, the precision the optimizer keeps.
                if old_lr > np.float32(self.min_lr):
                    new_lr = max(old_lr * self.factor, self.min_lr)
                    self.model.optimizer.learning_rate = new_lr
                    if self.verbose > 0:
                        _print_msg(
                            f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing "
                            f"learning rate to {new_lr}."
                        )
                    self.cooldown_counter = self.cooldown
                    self.wait = 0


class LearningRateScheduler(Callback):
    """Sets the learning rate at each epoch start to ``schedule(epoch, lr)``
    (or ``schedule(epoch)`` for a one-argument function); adds
    ``learning_rate`` to the epoch logs.

    Args:
        schedule: function of the 0-based epoch (and the current learning
            rate) returning a float.
        verbose: 1 prints the new rate each epoch.
    """

    def __init__(self, schedule, verbose=0):
        super().__init__()
        self.schedule = schedule
        self.verbose = verbose

    def _call_schedule(self, epoch, learning_rate):
        # Decide by signature rather than by catching TypeError, which would
        # also swallow a TypeError raised inside the schedule itself.
        try:
            inspect.signature(self.schedule).bind(epoch, learning_rate)
        except TypeError:
            return self.schedule(epoch)
        except ValueError:  # no introspectable signature
            pass
        return self.schedule(epoch, learning_rate)

    def on_epoch_begin(self, epoch, logs=None):
        optimizer = self.model.optimizer
        learning_rate = self._call_schedule(epoch, _get_learning_rate(optimizer))
        if not isinstance(learning_rate, (float, np.floating)) or not math.isfinite(learning_rate):
            raise ValueError(
                "The output of the `schedule` function should be a finite float. "
                f"Got: {learning_rate!r}"
            )
        optimizer.learning_rate = float(learning_rate)
        if self.verbose > 0:
            _print_msg(
                f"\nEpoch {epoch + 1}: LearningRateScheduler setting learning "
                f"rate to {float(learning_rate)}."
            )

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = _get_learning_rate(self.model.optimizer)


def _gather_stages(model):
    """Before a save in the middle of an epoch, under PipelineParallel with the pipe axis across
    workers: the other workers' stages (fit gathers only at epoch ends). A collective, reached by
    every worker at the same step: fit checks that every worker has the same mid-epoch savers."""
    gather = getattr(getattr(model, "_strategy", None), "gather_stages", None)
    if gather is not None:
        gather(model)


def _is_chief(model):
    """True where files are written: worker 0 of a multi-worker job, or any single process."""
    strategy = getattr(model, "distribute_strategy", None)
    return True if strategy is None else bool(getattr(strategy, "should_checkpoint", True))


class BackupAndRestore(Callback):
    """Fault tolerance: backs up the training state so that a job killed at any point and started
    again resumes where it stopped (keras.callbacks.BackupAndRestore).

    The backup is one model file, written atomically (a kill during a save leaves the previous
    backup intact), holding the weights (trainable and not), the optimizer state, the epoch and
    step reached, the model's shuffling seed and mdtrain's seed source. When ``fit`` starts and a
    backup exists, the model is restored from it and training continues at that epoch and step:
    the same batches follow, in the same order, so the final weights are bitwise those of an
    uninterrupted run (given the same script; layers that draw random numbers, such as Dropout,
    take their seeds when created: use keras.utils.set_random_seed, as for any reproducible run).
    A backup written under one strategy restores under any other. In a multi-worker job only the
    chief (worker 0) writes, and every worker restores from the same file, so ``backup_dir`` must
    be visible to all workers (a shared file system, as in TF).

    Args:
        backup_dir: directory for the backup (created if needed).
        save_freq: "epoch" (at each epoch end) or an integer N: also every N training steps.
        double_checkpoint: also keep the previous backup, used when the latest cannot be read.
        delete_checkpoint: remove the backup when training finishes.

    Epoch logs of a resumed epoch cover the steps run after the restart.
    """

    _FILE = "latest.mdtrain"
    _PREVIOUS = "previous.mdtrain"

    def __init__(self, backup_dir, save_freq="epoch", double_checkpoint=False, delete_checkpoint=True):
        super().__init__()
        if not backup_dir:
            raise ValueError("BackupAndRestore: backup_dir must be a non-empty path")
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f"BackupAndRestore: save_freq must be 'epoch' or a positive integer number of steps; "
                             f"received save_freq={save_freq!r}")
        self.backup_dir = os.fspath(backup_dir)
        self.save_freq = save_freq
        self.double_checkpoint = double_checkpoint
        self.delete_checkpoint = delete_checkpoint
        self._epoch = 0
        self._step = 0
        self._steps_since_save = 0

    @property
    def _latest(self):
        return os.path.join(self.backup_dir, self._FILE)

    @property
    def _previous(self):
        return os.path.join(self.backup_dir, self._PREVIOUS)

    def _implements_train_batch_hooks(self):
        return self.save_freq != "epoch"

    def on_train_begin(self, logs=None):
        self._epoch, self._step, self._steps_since_save = 0, 0, 0
        for path in (self._latest, self._previous) if self.double_checkpoint else (self._latest,):
            if not os.path.exists(path):
                continue
            try:
                self._restore(path)
                return
            except (ValueError, OSError) as e:
                if not self.double_checkpoint or path == self._previous:
                    raise ValueError(f"BackupAndRestore: cannot restore from {path}: {e}") from e
                warnings.warn(f"BackupAndRestore: {path} is unreadable ({e}); using the previous backup",
                              RuntimeWarning, stacklevel=2)

    def _restore(self, path):
        """Restores the model from the backup at `path`. Everything is checked before the model is
        touched, so a backup that does not fit leaves the model as it was."""
        from mdtrain import _core, _random

        core, metadata = _core.load_model(path)
        state = json.loads(metadata).get("backup")
        if state is None:
            raise ValueError("the file holds no backup state (was it written by BackupAndRestore?)")
        model = self.model
        mine = [np.shape(w) for w in model.get_weights()]
        weights = core.get_weights()
        theirs = [np.shape(w) for w in weights]
        if mine != theirs:
            raise ValueError(f"the backed-up weights have shapes {theirs}, the model has {mine}")
        optimizer_state = self._optimizer_state_for(model, core)
        epoch, step = int(state["epoch"]), int(state["step"])
        self._check_same_batches(state, step)
        model.set_weights(weights)
        model._core.set_optimizer_state(optimizer_state)
        model._shuffle_seed = int(state["seed"])
        _random._set_state(state["rng"])
        self._epoch, self._step = epoch, step
        model._resume_at = (self._epoch, self._step)

    @staticmethod
    def _optimizer_state_for(model, core):
        """The backup's optimizer state under this model's weight names. Slots are named after
        their weights ("dense_3/kernel/momentum"), and a model built again in the same process
        (a notebook cell run twice) has new automatic names: weights are matched by position and
        shape, as the weights themselves are, not by name."""
        backup_optimizer = json.loads(core.optimizer().config_json())["class_name"] if core.compiled else None
        ours = json.loads(model._core.optimizer().config_json())["class_name"]
        if backup_optimizer != ours:
            raise ValueError(f"the backup holds the state of a {backup_optimizer} optimizer; the model is compiled "
                             f"with {ours}")
        def trainable_names(layers):
            names = []
            for layer in layers:
                names += [n for n, t in zip(layer.weight_names(), layer.weight_trainable()) if t]
            return names

        theirs = trainable_names(core.layers)
        mine = trainable_names([l._core for l in model._layers])
        renamed = dict(zip(theirs, mine))
        state = []
        for name, value in core.optimizer_state():
            weight, _, slot = name.rpartition("/")
            if weight:
                if weight not in renamed:
                    raise ValueError(f"the backup's optimizer slot {name!r} belongs to no weight of the backup")
                name = f"{renamed[weight]}/{slot}"
            state.append((name, value))
        return state

    def _check_same_batches(self, state, step):
        """A backup taken in the middle of an epoch resumes at its step: only the same batch size and
        steps per epoch make that step name the same samples (at an epoch's end any will do)."""
        if step == 0 or "batch_size" not in state:
            return
        batch_size, steps = self.model._fit_batch_size, self.model._fit_steps
        if (state["batch_size"], state["steps"]) != (batch_size, steps):
            raise ValueError(f"the backup stopped at step {step} of epoch {int(state['epoch']) + 1} of a run with "
                             f"batch_size={state['batch_size']} and {state['steps']} steps per epoch; this fit has "
                             f"batch_size={batch_size} and {steps} steps per epoch, so that step would not name the "
                             "same samples. Resume with the same batch size and data, or delete the backup to start "
                             "over.")

    def on_epoch_begin(self, epoch, logs=None):
        if epoch != self._epoch:
            self._epoch, self._step = epoch, 0

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        self._steps_since_save += 1
        if self.save_freq != "epoch" and self._steps_since_save >= self.save_freq:
            self._save(self._epoch, self._step)

    def on_epoch_end(self, epoch, logs=None):
        self._epoch, self._step = epoch + 1, 0
        self._save(epoch + 1, 0)

    def _save(self, epoch, step):
        self._steps_since_save = 0
        if step != 0:
            _gather_stages(self.model)  # mid-epoch; fit gathers at each epoch's end
        if not _is_chief(self.model):
            return
        from mdtrain import _random

        os.makedirs(self.backup_dir, exist_ok=True)
        if self.double_checkpoint and os.path.exists(self._latest):
            os.replace(self._latest, self._previous)
        state = {"epoch": epoch, "step": step, "seed": str(self.model._epoch_seed()), "rng": _random._get_state(),
                 "batch_size": self.model._fit_batch_size, "steps": self.model._fit_steps}
        self.model._core.save(self._latest, json.dumps({"backup": state}))

    def on_train_end(self, logs=None):
        if self.delete_checkpoint and _is_chief(self.model):
            for path in (self._latest, self._previous):
                if os.path.exists(path):
                    os.remove(path)


from mdtrain.keras._tensorboard import TensorBoard  # noqa: E402  (it subclasses Callback)
