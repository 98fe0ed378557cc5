"""Keras callbacks driven the way mdtrain's fit/evaluate/predict loops drive them.

A small fake model stands in for the real one, so these tests need neither the
compiled core nor any training.
"""

import math
import os
import re
import warnings

import numpy as np
import pytest

from mdtrain.keras import callbacks as C
from mdtrain.keras.utils import Progbar
from mdtrain.keras.utils import progbar as progbar_module


@pytest.fixture(autouse=True)
def plain_display(monkeypatch):
    # Whatever terminal or IDE runs the tests, expect line-by-line output
    # (the in-place mode has its own test).
    monkeypatch.setattr(progbar_module, "dynamic_display", lambda: False)


class FakeOptimizer:
    def __init__(self, learning_rate=0.01):
        self.learning_rate = learning_rate


class FakeModel:
    """Weights are one array updated in place each epoch (like live
    parameters), so a callback that keeps get_weights() without copying it
    would see its "best" weights change."""

    def __init__(self, metrics=(), metrics_names=()):
        self.stop_training = False
        self._w = np.zeros(3)
        self.optimizer = FakeOptimizer()
        self.metrics = list(metrics)
        self.metrics_names = list(metrics_names)
        self.saves = []
        self.fail_next_save = False

    def train_epoch(self, epoch):
        self._w[:] = epoch

    def get_weights(self):
        return [self._w]

    def set_weights(self, weights):
        self._w[:] = weights[0]

    def _write(self, path, kind):
        if self.fail_next_save:
            self.fail_next_save = False
            raise OSError("disk full")
        # Atomic like the real save: write aside, then rename over.
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{kind} {self._w[0]:g}")
        os.replace(tmp, path)
        self.saves.append((kind, path))

    def save(self, path):
        self._write(path, "model")

    def save_weights(self, path):
        self._write(path, "weights")


def fit(model, callbacks, epoch_logs, steps=3, verbose=0, batch_losses=None):
    """Mirrors the fit loop: returns (History, epochs run)."""
    cbs = C.CallbackList(
        callbacks,
        add_history=True,
        add_progbar=verbose != 0,
        model=model,
        verbose=verbose,
        epochs=len(epoch_logs),
        steps=steps,
    )
    model.stop_training = False
    cbs.on_train_begin()
    batch_hooks = cbs.needs_batch_hooks()
    logs = None
    epochs_run = 0
    for epoch, logs in enumerate(epoch_logs):
        epochs_run += 1
        cbs.on_epoch_begin(epoch)
        model.train_epoch(epoch)
        for step in range(steps):
            if batch_hooks:
                cbs.on_train_batch_begin(step)
                loss = batch_losses[epoch][step] if batch_losses else 0.5
                cbs.on_train_batch_end(step, {"loss": loss, "accuracy": 0.75})
            if model.stop_training:
                break
        logs = dict(logs)
        cbs.on_epoch_end(epoch, logs)
        if model.stop_training:
            break
    cbs.on_train_end(logs)
    return model.history, epochs_run


def loss_logs(values, key="val_loss"):
    return [{"loss": 1.0, key: v} for v in values]


# --------------------------------------------------------------------------- base


class Recorder(C.Callback):
    def __init__(self):
        super().__init__()
        self.calls = []

    def on_batch_end(self, batch, logs=None):
        self.calls.append(("batch_end", batch, dict(logs)))

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(("epoch_end", epoch, dict(logs)))


def test_callback_base_holds_model_and_params():
    cb = C.Callback()
    assert cb.model is None and cb.params is None
    model = FakeModel()
    cb.set_model(model)
    cb.set_params({"epochs": 3})
    assert cb.model is model
    assert cb.params == {"epochs": 3}
    # Default hooks are no-ops.
    cb.on_train_begin()
    cb.on_epoch_end(0, {"loss": 1.0})
    cb.on_predict_batch_end(0)


def test_train_batch_end_forwards_to_legacy_on_batch_end():
    rec = Recorder()
    rec.on_train_batch_end(4, {"loss": 2.0})
    assert rec.calls == [("batch_end", 4, {"loss": 2.0})]
    assert rec._implements_train_batch_hooks()
    assert not rec._implements_test_batch_hooks()


def test_callback_list_adds_history_and_progbar_once():
    model = FakeModel()
    cbs = C.CallbackList(None, add_history=True, add_progbar=True, model=model, verbose=1, epochs=2, steps=5)
    kinds = [type(cb) for cb in cbs.callbacks]
    assert kinds == [C.History, C.ProgbarLogger]
    assert model.history is cbs.callbacks[0]
    for cb in cbs.callbacks:
        assert cb.model is model
        assert cb.params == {"verbose": 1, "epochs": 2, "steps": 5}

    mine_h, mine_p = C.History(), C.ProgbarLogger()
    cbs = C.CallbackList([mine_p, [mine_h]], add_history=True, add_progbar=True, model=model, verbose=2, epochs=1, steps=1)
    assert cbs.callbacks == [mine_p, mine_h]
    assert model.history is mine_h
    assert mine_p.verbose == 2

    cbs = C.CallbackList([], add_history=False, add_progbar=False)
    assert cbs.callbacks == []


def test_callback_list_rejects_non_callbacks():
    with pytest.raises(TypeError, match="callbacks"):
        C.CallbackList([C.History(), "early_stopping"])


def test_callback_list_append_sets_model_and_params():
    model = FakeModel()
    cbs = C.CallbackList([], model=model, verbose=0, epochs=1, steps=1)
    rec = Recorder()
    cbs.append(rec)
    assert rec.model is model and rec.params["epochs"] == 1
    assert list(cbs) == [rec]


def test_batch_logs_become_sorted_python_floats():
    rec = Recorder()
    cbs = C.CallbackList([rec])
    cbs.on_train_batch_end(0, {"loss": np.float32(0.25), "accuracy": np.float64(0.5), "nested": {"b": np.int64(3)}})
    _, _, logs = rec.calls[0]
    # Keys sorted at the top level, nested dicts flattened in place.
    assert list(logs) == ["accuracy", "loss", "b"]
    assert all(type(v) is float for v in logs.values())
    assert logs == {"accuracy": 0.5, "b": 3.0, "loss": 0.25}


def test_needs_batch_hooks():
    def needs(callbacks, mode="train", **params):
        params = {"verbose": 0, "epochs": 1, "steps": 10, **params}
        return C.CallbackList(callbacks, add_history=True, add_progbar=params["verbose"] != 0, **params).needs_batch_hooks(mode)

    assert not needs([])
    assert not needs([C.EarlyStopping(), C.CSVLogger("unused.csv"), C.LambdaCallback(on_epoch_end=print)])
    assert needs([], verbose=1)
    assert not needs([], verbose=2)
    assert needs([], verbose=2, steps=None)  # must count steps to know the total
    assert needs([C.TerminateOnNaN()])
    assert needs([C.LambdaCallback(on_train_batch_end=print)])
    assert needs([C.LambdaCallback(on_batch_begin=print)])
    assert not needs([C.ModelCheckpoint("m.keras")])
    assert needs([C.ModelCheckpoint("m.keras", save_freq=5)])
    assert needs([Recorder()])
    assert not needs([Recorder()], mode="test")
    assert needs([C.LambdaCallback(on_test_batch_end=print)], mode="test")
    assert needs([], mode="predict", verbose=1)
    with pytest.raises(ValueError, match="mode"):
        needs([], mode="validate")


def test_progbar_logger_ignores_validation_batches_inside_fit():
    cbs = C.CallbackList([], add_progbar=True, verbose=1, epochs=1, steps=10)
    assert cbs.needs_batch_hooks("test")  # a standalone evaluate() prints
    cbs.on_train_begin()
    assert not cbs.needs_batch_hooks("test")


def test_epoch_logs_are_shared_so_later_callbacks_see_additions():
    model = FakeModel()
    history, _ = fit(model, [C.ReduceLROnPlateau(monitor="val_loss")], loss_logs([1.0, 0.9]))
    assert history.history["learning_rate"] == [0.01, 0.01]


# ------------------------------------------------------------------------ History


def test_history_records_every_epoch():
    model = FakeModel()
    logs = [{"loss": 1.0 - 0.1 * e, "accuracy": 0.5 + 0.1 * e, "val_loss": 2.0 - e} for e in range(3)]
    history, epochs_run = fit(model, [], logs)
    assert epochs_run == 3
    assert model.history is history
    assert history.epoch == [0, 1, 2]
    assert history.history == {
        "loss": [1.0, 0.9, 0.8],
        "accuracy": [0.5, 0.6, 0.7],
        "val_loss": [2.0, 1.0, 0.0],
    }
    assert history.params == {"verbose": 0, "epochs": 3, "steps": 3}


# ------------------------------------------------------------------ EarlyStopping


@pytest.mark.parametrize("patience", [0, 1, 2, 3])
def test_early_stopping_patience(patience):
    losses = [10.0, 9.0, 8.0, 9.0, 8.9, 8.8, 8.7, 8.6, 8.5]
    stopper = C.EarlyStopping(monitor="loss", patience=patience)
    history, epochs_run = fit(FakeModel(), [stopper], loss_logs(losses, key="loss"))
    # Best is epoch 2; the wait counts every epoch after it, stopping once it
    # reaches patience (and never at epoch 0).
    assert stopper.stopped_epoch == max(patience, 1) + 2
    assert epochs_run == stopper.stopped_epoch + 1
    assert history.epoch == list(range(epochs_run))


def test_early_stopping_min_delta():
    losses = [1.0, 0.95, 0.85, 0.8, 0.79, 0.78]
    stopper = C.EarlyStopping(min_delta=0.1, patience=2)
    _, epochs_run = fit(FakeModel(), [stopper], loss_logs(losses))
    # 0.95 is not 0.1 better than 1.0; 0.85 is; 0.8 and 0.79 are not.
    assert stopper.stopped_epoch == 4
    assert epochs_run == 5

    stopper = C.EarlyStopping(min_delta=0, patience=2)
    _, epochs_run = fit(FakeModel(), [stopper], loss_logs(losses))
    assert stopper.stopped_epoch == 0
    assert epochs_run == 6


def test_early_stopping_negative_min_delta_is_its_absolute_value():
    assert C.EarlyStopping(min_delta=-0.1).min_delta == 0.1


def test_early_stopping_baseline_never_beaten_restores_best():
    model = FakeModel()
    stopper = C.EarlyStopping(patience=5, baseline=0.5, restore_best_weights=True)
    _, epochs_run = fit(model, [stopper], loss_logs([0.9, 0.8, 0.7, 0.71, 0.72, 0.73]))
    # The wait never restarts (0.5 is never beaten): it reaches 5 at epoch 4.
    assert epochs_run == 5
    assert stopper.stopped_epoch == 4
    assert stopper.best_epoch == 2
    np.testing.assert_array_equal(model.get_weights()[0], np.full(3, 2.0))


def test_early_stopping_baseline_beaten_restarts_wait():
    stopper = C.EarlyStopping(patience=1, baseline=0.95)
    _, epochs_run = fit(FakeModel(), [stopper], loss_logs([1.0, 0.9, 0.91, 0.92]))
    assert stopper.stopped_epoch == 2
    assert epochs_run == 3


def test_early_stopping_restore_best_weights_keeps_a_copy():
    model = FakeModel()
    stopper = C.EarlyStopping(patience=2, restore_best_weights=True, verbose=1)
    _, epochs_run = fit(model, [stopper], loss_logs([0.2, 0.15, 0.1, 0.11, 0.12, 0.05]))
    assert epochs_run == 5
    # The model trained through epoch 4 in place; epoch 2's weights come back.
    np.testing.assert_array_equal(model.get_weights()[0], np.full(3, 2.0))


def test_early_stopping_restores_even_without_stopping():
    model = FakeModel()
    stopper = C.EarlyStopping(patience=5, restore_best_weights=True)
    _, epochs_run = fit(model, [stopper], loss_logs([0.3, 0.1, 0.2]))
    assert epochs_run == 3 and stopper.stopped_epoch == 0
    np.testing.assert_array_equal(model.get_weights()[0], np.full(3, 1.0))


def test_early_stopping_without_restore_keeps_last_weights():
    model = FakeModel()
    _, epochs_run = fit(model, [C.EarlyStopping(patience=1)], loss_logs([0.1, 0.2, 0.3, 0.4]))
    assert epochs_run == 2
    np.testing.assert_array_equal(model.get_weights()[0], np.full(3, 1.0))


def test_early_stopping_start_from_epoch():
    losses = [5.0, 4.0, 3.0, 3.5, 3.6, 3.7, 3.8]
    stopper = C.EarlyStopping(patience=0)
    _, epochs_run = fit(FakeModel(), [stopper], loss_logs(losses))
    assert stopper.stopped_epoch == 3 and epochs_run == 4

    # Epochs 0-2 are warm-up: 3.5 becomes the first best, 3.6 stops.
    stopper = C.EarlyStopping(patience=0, start_from_epoch=3)
    _, epochs_run = fit(FakeModel(), [stopper], loss_logs(losses))
    assert stopper.stopped_epoch == 4 and epochs_run == 5


def test_early_stopping_modes():
    accuracies = [0.5, 0.6, 0.55, 0.7]
    # auto: accuracy is maximised.
    stopper = C.EarlyStopping(monitor="val_accuracy", patience=0)
    _, epochs_run = fit(FakeModel(), [stopper], loss_logs(accuracies, key="val_accuracy"))
    assert stopper.stopped_epoch == 2 and epochs_run == 3
    # min: the rising accuracy counts as getting worse.
    stopper = C.EarlyStopping(monitor="val_accuracy", patience=0, mode="min")
    _, epochs_run = fit(FakeModel(), [stopper], loss_logs(accuracies, key="val_accuracy"))
    assert stopper.stopped_epoch == 1
    # max on a loss.
    stopper = C.EarlyStopping(monitor="val_loss", patience=0, mode="max")
    _, epochs_run = fit(FakeModel(), [stopper], loss_logs([1.0, 0.9]))
    assert stopper.stopped_epoch == 1


@pytest.mark.parametrize(
    "monitor,maximize",
    [
        ("val_loss", False),
        ("loss", False),
        ("val_mse", False),
        ("mean_absolute_error", False),
        ("hinge", False),
        ("sparse_categorical_crossentropy", False),
        ("acc", True),
        ("val_accuracy", True),
        ("sparse_categorical_accuracy", True),
        ("val_auc", True),
        ("f1_score", True),
        ("precision", True),
    ],
)
def test_auto_mode_direction(monitor, maximize):
    stopper = C.EarlyStopping(monitor=monitor)
    stopper.set_model(FakeModel())
    stopper.on_train_begin()
    assert stopper.monitor_op is (np.greater if maximize else np.less)


def test_auto_mode_uses_model_metric_direction():
    class Metric:
        def __init__(self, name, direction):
            self.name = name
            self._direction = direction

    class MetricsList:
        metrics = [Metric("score", "up")]

    model = FakeModel(metrics=[MetricsList()])
    stopper = C.EarlyStopping(monitor="val_score")
    stopper.set_model(model)
    stopper.on_train_begin()
    assert stopper.monitor_op is np.greater


def test_auto_mode_unknown_metric_raises_before_training():
    stopper = C.EarlyStopping(monitor="wiggle")
    stopper.set_model(FakeModel())
    with pytest.raises(ValueError, match="mode='max'"):
        stopper.on_train_begin()
    # An explicit mode needs no inference.
    stopper = C.EarlyStopping(monitor="wiggle", mode="max")
    stopper.set_model(FakeModel())
    stopper.on_train_begin()


@pytest.mark.parametrize(
    "make",
    [
        lambda: C.EarlyStopping(mode="maximum"),
        lambda: C.ModelCheckpoint("m.keras", mode="Max"),
        lambda: C.ReduceLROnPlateau(mode="up"),
    ],
)
def test_unknown_mode_raises(make):
    with pytest.raises(ValueError, match="mode"):
        make()


def test_early_stopping_missing_monitor_warns_with_available_keys():
    stopper = C.EarlyStopping(monitor="val_loss", patience=0)
    with pytest.warns(UserWarning, match=r"`val_loss` which is not available.*loss,accuracy"):
        _, epochs_run = fit(FakeModel(), [stopper], [{"loss": 1.0, "accuracy": 0.5}] * 3)
    assert epochs_run == 3 and stopper.stopped_epoch == 0


def test_early_stopping_verbose_messages(capsys):
    stopper = C.EarlyStopping(patience=1, restore_best_weights=True, verbose=1)
    fit(FakeModel(), [stopper], loss_logs([0.5, 0.4, 0.45, 0.46, 0.3]))
    out = capsys.readouterr().out
    assert "Epoch 3: early stopping" in out
    assert "Restoring model weights from the end of the best epoch: 2." in out


def test_early_stopping_instance_is_reusable():
    stopper = C.EarlyStopping(patience=0)
    model = FakeModel()
    fit(model, [stopper], loss_logs([0.1, 0.2]))
    assert stopper.stopped_epoch == 1
    # A second run with higher losses must not compare against the old best.
    _, epochs_run = fit(model, [stopper], loss_logs([5.0, 4.0, 3.0]))
    assert epochs_run == 3 and stopper.stopped_epoch == 0


# ---------------------------------------------------------------- ModelCheckpoint


def test_model_checkpoint_formats_file_names(tmp_path):
    model = FakeModel()
    pattern = str(tmp_path / "ckpt-{epoch:02d}-{val_loss:.2f}.keras")
    fit(model, [C.ModelCheckpoint(pattern)], loss_logs([0.5, 0.25, 0.125]))
    names = sorted(os.listdir(tmp_path))
    assert names == ["ckpt-01-0.50.keras", "ckpt-02-0.25.keras", "ckpt-03-0.12.keras"]
    assert (tmp_path / "ckpt-02-0.25.keras").read_text() == "model 1"
    assert [kind for kind, _ in model.saves] == ["model"] * 3


def test_model_checkpoint_creates_directories_and_saves_weights(tmp_path):
    model = FakeModel()
    path = tmp_path / "a" / "b" / "w-{epoch}.weights.h5"
    fit(model, [C.ModelCheckpoint(path, save_weights_only=True)], loss_logs([0.5]))
    assert (tmp_path / "a" / "b" / "w-1.weights.h5").read_text() == "weights 0"
    assert model.saves == [("weights", str(tmp_path / "a" / "b" / "w-1.weights.h5"))]


def test_model_checkpoint_save_best_only(tmp_path):
    model = FakeModel()
    path = str(tmp_path / "best.keras")
    checkpoint = C.ModelCheckpoint(path, save_best_only=True)
    fit(model, [checkpoint], loss_logs([0.5, 0.6, 0.4, 0.45]))
    # Saved after epochs 0 and 2 only; the file holds epoch 2's model.
    assert len(model.saves) == 2
    assert (tmp_path / "best.keras").read_text() == "model 2"
    assert checkpoint.best == 0.4


def test_model_checkpoint_save_best_only_max_and_threshold(tmp_path):
    model = FakeModel()
    path = str(tmp_path / "best-{epoch}.keras")
    checkpoint = C.ModelCheckpoint(
        path, monitor="val_accuracy", save_best_only=True, mode="max", initial_value_threshold=0.65
    )
    fit(model, [checkpoint], loss_logs([0.6, 0.7, 0.68, 0.9], key="val_accuracy"))
    assert sorted(os.listdir(tmp_path)) == ["best-2.keras", "best-4.keras"]


def test_model_checkpoint_verbose_messages(tmp_path, capsys):
    path = str(tmp_path / "best.keras")
    fit(FakeModel(), [C.ModelCheckpoint(path, save_best_only=True, verbose=1)], loss_logs([0.5, 0.6]))
    out = capsys.readouterr().out
    assert f"Epoch 1: val_loss improved from inf to 0.50000, saving model to {path}" in out
    assert "Epoch 2: val_loss did not improve from 0.50000" in out


def test_model_checkpoint_save_freq_in_batches(tmp_path):
    model = FakeModel()
    pattern = str(tmp_path / "b-{epoch}-{batch}.keras")
    # 3 batches per epoch, a save every 2 batches: after global batches 2, 4, 6.
    fit(model, [C.ModelCheckpoint(pattern, save_freq=2)], loss_logs([0.5, 0.4]), steps=3)
    assert sorted(os.listdir(tmp_path)) == ["b-1-2.keras", "b-2-1.keras", "b-2-3.keras"]


@pytest.mark.parametrize("save_freq", ["batch", 0, -3, True, 2.5])
def test_model_checkpoint_rejects_bad_save_freq(save_freq):
    with pytest.raises(ValueError, match="save_freq"):
        C.ModelCheckpoint("m.keras", save_freq=save_freq)


def test_model_checkpoint_missing_format_key(tmp_path):
    with pytest.raises(KeyError, match="val_auc"):
        fit(FakeModel(), [C.ModelCheckpoint(str(tmp_path / "{val_auc}.keras"))], loss_logs([0.5]))


def test_model_checkpoint_failed_save_leaves_previous_checkpoint(tmp_path):
    model = FakeModel()
    path = str(tmp_path / "latest.keras")
    checkpoint = C.ModelCheckpoint(path)
    checkpoint.set_model(model)
    checkpoint.on_train_begin()
    checkpoint.on_epoch_end(0, {"val_loss": 0.5})
    model.train_epoch(1)
    model.fail_next_save = True
    with pytest.raises(OSError, match="disk full"):
        checkpoint.on_epoch_end(1, {"val_loss": 0.4})
    assert (tmp_path / "latest.keras").read_text() == "model 0"


def test_model_checkpoint_save_best_only_without_monitor_saves_and_warns(tmp_path):
    model = FakeModel()
    with pytest.warns(UserWarning, match="val_loss available"):
        fit(model, [C.ModelCheckpoint(str(tmp_path / "m.keras"), save_best_only=True)], [{"loss": 1.0}])
    assert len(model.saves) == 1


# ----------------------------------------------------------------- TerminateOnNaN


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, np.float32("nan")])
def test_terminate_on_nan_stops_training(bad, capsys):
    model = FakeModel()
    batch_losses = [[0.5, 0.4, 0.3], [0.2, bad, 0.1], [0.1, 0.1, 0.1]]
    _, epochs_run = fit(model, [C.TerminateOnNaN()], loss_logs([0.5] * 3), batch_losses=batch_losses)
    assert model.stop_training
    assert epochs_run == 2
    assert "Batch 1: Invalid loss, terminating training" in capsys.readouterr().out


def test_terminate_on_nan_ignores_finite_losses(capsys):
    model = FakeModel()
    _, epochs_run = fit(model, [C.TerminateOnNaN()], loss_logs([0.5] * 3), batch_losses=[[1e30, 0.0, -1.0]] * 3)
    assert epochs_run == 3 and not model.stop_training
    assert capsys.readouterr().out == ""


def test_terminate_on_nan_raise_error():
    cb = C.TerminateOnNaN(raise_error=True)
    cb.set_model(FakeModel())
    with pytest.raises(RuntimeError, match="batch 7"):
        cb.on_train_batch_end(7, {"loss": math.nan})


# ----------------------------------------------------------------- LambdaCallback


def test_lambda_callback_calls_given_functions():
    calls = []
    cb = C.LambdaCallback(
        on_train_begin=lambda logs: calls.append("train_begin"),
        on_epoch_begin=lambda epoch, logs: calls.append(("epoch_begin", epoch)),
        on_train_batch_end=lambda batch, logs: calls.append(("batch_end", batch, logs["loss"])),
        on_epoch_end=lambda epoch, logs: calls.append(("epoch_end", epoch, logs["val_loss"])),
        on_train_end=lambda logs: calls.append(("train_end", logs["val_loss"])),
    )
    fit(FakeModel(), [cb], loss_logs([0.5, 0.25]), steps=2)
    assert calls == [
        "train_begin",
        ("epoch_begin", 0),
        ("batch_end", 0, 0.5),
        ("batch_end", 1, 0.5),
        ("epoch_end", 0, 0.5),
        ("epoch_begin", 1),
        ("batch_end", 0, 0.5),
        ("batch_end", 1, 0.5),
        ("epoch_end", 1, 0.25),
        ("train_end", 0.25),
    ]


def test_lambda_callback_other_hooks_by_keyword():
    calls = []
    cb = C.LambdaCallback(on_test_end=lambda logs: calls.append(logs))
    C.CallbackList([cb]).on_test_end({"loss": 3.0})
    assert calls == [{"loss": 3.0}]
    with pytest.raises(TypeError, match="on_epoch_ends"):
        C.LambdaCallback(on_epoch_ends=print)


# ---------------------------------------------------------------------- CSVLogger


def test_csv_logger_writes_keras_format(tmp_path):
    path = tmp_path / "log.csv"
    logs = [{"loss": 0.5, "accuracy": 0.75, "val_loss": 0.625, "val_accuracy": 0.5}, {"loss": 0.25, "accuracy": 0.875, "val_loss": 0.5, "val_accuracy": 0.625}]
    fit(FakeModel(), [C.CSVLogger(path)], logs)
    assert path.read_text() == (
        "epoch,accuracy,loss,val_accuracy,val_loss\n"
        "0,0.75,0.5,0.5,0.625\n"
        "1,0.875,0.25,0.625,0.5\n"
    )


def test_csv_logger_flushes_each_epoch(tmp_path):
    path = tmp_path / "log.csv"
    logger = C.CSVLogger(path, separator=";")
    logger.set_model(FakeModel())
    logger.on_train_begin()
    logger.on_epoch_end(0, {"loss": np.float32(0.5), "lr": np.array(0.125)})
    assert path.read_text() == "epoch;loss;lr\n0;0.5;0.125\n"
    logger.on_train_end()


def test_csv_logger_append_and_overwrite(tmp_path):
    path = tmp_path / "log.csv"
    fit(FakeModel(), [C.CSVLogger(path)], [{"loss": 0.5}])
    fit(FakeModel(), [C.CSVLogger(path, append=True)], [{"loss": 0.25}, {"loss": 0.125}])
    assert path.read_text() == "epoch,loss\n0,0.5\n0,0.25\n1,0.125\n"
    fit(FakeModel(), [C.CSVLogger(path)], [{"loss": 1.0}])
    assert path.read_text() == "epoch,loss\n0,1.0\n"


def test_csv_logger_append_to_empty_file_writes_header(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("")
    fit(FakeModel(), [C.CSVLogger(path, append=True)], [{"loss": 0.5}])
    assert path.read_text() == "epoch,loss\n0,0.5\n"


def test_csv_logger_reserves_expected_validation_columns(tmp_path):
    path = tmp_path / "log.csv"
    model = FakeModel(metrics_names=["loss", "val_loss"])
    fit(model, [C.CSVLogger(path)], [{"loss": 0.5}, {"loss": 0.25, "val_loss": 0.75}])
    assert path.read_text() == "epoch,loss,val_loss\n0,0.5,NA\n1,0.25,0.75\n"


# ------------------------------------------------------------------ ProgbarLogger

LOGS = [
    {"loss": 0.5, "accuracy": 0.8, "val_loss": 0.00001, "val_accuracy": 0.9},
    {"loss": 0.25, "accuracy": 0.9, "val_loss": 0.5, "val_accuracy": 0.95},
]


def test_progbar_logger_verbose_1(capsys):
    fit(FakeModel(), [], LOGS, steps=1875, verbose=1)
    out = capsys.readouterr().out
    assert out.startswith("Epoch 1/2\n")
    assert "Epoch 2/2\n" in out
    # Not a TTY under capsys: each redraw is its own line.
    finals = [line for line in out.splitlines() if line.startswith("1875/1875 ")]
    assert len(finals) == 2
    assert re.fullmatch(
        r"1875/1875 ━{20} \d+s \d+(us|ms|s)/step - accuracy: 0\.8000 - loss: 0\.5000"
        r" - val_accuracy: 0\.9000 - val_loss: 1\.0000e-05",
        finals[0],
    )
    assert finals[1].endswith("accuracy: 0.9000 - loss: 0.2500 - val_accuracy: 0.9500 - val_loss: 0.5000")
    # The first step is always drawn, with an ETA and the running batch values.
    assert re.search(r"^   1/1875 ─{20} \d+s \d+(us|ms|s)/step - accuracy: 0\.7500 - loss: 0\.5000$", out, re.M)


def test_progbar_logger_verbose_2_one_line_per_epoch(capsys):
    fit(FakeModel(), [], LOGS, steps=1875, verbose=2)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert lines[0] == "Epoch 1/2" and lines[2] == "Epoch 2/2"
    assert re.fullmatch(
        r"1875/1875 - \d+s - \d+(us|ms|s)/step - accuracy: 0\.8000 - loss: 0\.5000"
        r" - val_accuracy: 0\.9000 - val_loss: 1\.0000e-05",
        lines[1],
    )
    assert lines[3].startswith("1875/1875 - ")
    assert "loss: 0.2500" in lines[3]


def test_progbar_logger_single_epoch_has_no_epoch_header(capsys):
    fit(FakeModel(), [], [{"loss": 0.5}], steps=10, verbose=2)
    out = capsys.readouterr().out
    assert "Epoch" not in out
    assert out.startswith("10/10 - ") and out.count("\n") == 1


def test_progbar_logger_dynamic_display_redraws_in_place(capsys, monkeypatch):
    monkeypatch.setattr(progbar_module, "dynamic_display", lambda: True)
    fit(FakeModel(), [], LOGS, steps=50, verbose=1)
    out = capsys.readouterr().out
    # Only the epoch headers and the final bar of each epoch end a line.
    assert out.count("\n") == 4
    assert out.count("\r") >= 4
    assert "\x1b[1m50/50\x1b[0m" in out
    assert "Epoch 1/2\n\r" in out


def test_progbar_logger_unknown_steps(capsys):
    cbs = C.CallbackList([], add_progbar=True, verbose=1, epochs=1, steps=None)
    cbs.on_train_begin()
    cbs.on_epoch_begin(0)
    for step in range(4):
        cbs.on_train_batch_end(step, {"loss": 0.5})
    cbs.on_epoch_end(0, {"loss": 0.5})
    out = capsys.readouterr().out
    assert "      1/Unknown" in out
    assert re.search(r"^4/4 ━{20} \d+s", out, re.M)


def test_progbar_logger_evaluate_and_predict(capsys):
    cbs = C.CallbackList([], add_progbar=True, verbose=1, epochs=1, steps=313)
    cbs.on_test_begin()
    for step in range(313):
        cbs.on_test_batch_end(step, {"loss": 0.1, "accuracy": 0.97})
    cbs.on_test_end({"loss": 0.1, "accuracy": 0.97})
    out = capsys.readouterr().out
    assert "Epoch" not in out
    assert re.search(r"^313/313 ━{20} \d+s \d+(us|ms|s)/step - accuracy: 0\.9700 - loss: 0\.1000$", out, re.M)

    cbs = C.CallbackList([], add_progbar=True, verbose=1, epochs=1, steps=4)
    cbs.on_predict_begin()
    for step in range(4):
        cbs.on_predict_batch_end(step, {"outputs": np.zeros((2, 2))})
    cbs.on_predict_end()
    out = capsys.readouterr().out
    assert re.search(r"^4/4 ━{20} \d+s \d+(us|ms|s)/step$", out, re.M)
    assert "outputs" not in out


def test_progbar_logger_silent_during_validation_in_fit(capsys):
    cbs = C.CallbackList([], add_progbar=True, verbose=2, epochs=1, steps=5)
    cbs.on_train_begin()
    cbs.on_epoch_begin(0)
    cbs.on_test_begin()
    for step in range(3):
        cbs.on_test_batch_end(step, {"loss": 9.0})
    cbs.on_test_end({"loss": 9.0})
    assert capsys.readouterr().out == ""
    cbs.on_epoch_end(0, {"loss": 0.5, "val_loss": 9.0})
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "val_loss: 9.0000" in out


# ------------------------------------------------------------------------ Progbar


def test_progbar_value_and_time_formats():
    assert progbar_module.format_value(0.5) == "0.5000"
    assert progbar_module.format_value(-0.5) == "-0.5000"
    assert progbar_module.format_value(1e-5) == "1.0000e-05"
    assert progbar_module.format_value(0.0) == "0.0000e+00"
    assert progbar_module.format_value(np.array([1.0, 2.0])) == "1.5000"
    assert progbar_module.format_step_time(2.0, "step") == " 2s/step"
    assert progbar_module.format_step_time(0.0015, "step") == " 2ms/step"
    assert progbar_module.format_step_time(5e-6, "sample") == " 5us/sample"
    assert progbar_module.format_eta(3700) == "1:01:40"
    assert progbar_module.format_eta(75) == "1:15"
    assert progbar_module.format_eta(3.7) == "3s"


def test_progbar_averages_stateless_metrics(capsys):
    bar = Progbar(10, verbose=1, interval=0)
    bar.update(1, [("a", 1.0), ("s", 7.0)])
    bar.update(3, [("a", 4.0), ("s", 1.0)])  # stands for steps 2 and 3
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.endswith(" - a: 3.0000 - s: 3.0000")

    bar = Progbar(10, verbose=1, interval=0, stateful_metrics=["s"])
    bar.update(1, [("a", 1.0), ("s", 7.0)])
    bar.update(3, [("a", 4.0), ("s", 1.0)])
    assert capsys.readouterr().out.splitlines()[-1].endswith(" - a: 3.0000 - s: 1.0000")


def test_progbar_add_and_eta(capsys):
    bar = Progbar(100, verbose=1, interval=0, stateless_metrics=())
    bar.add(1, [("loss", 2.0)])
    bar.add(9, [("loss", 1.0)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith(" 10/100 ━━")
    assert lines[-1].endswith(" - loss: 1.0000")


def test_progbar_interval_throttles_redraws(capsys):
    bar = Progbar(100, verbose=1, interval=3600)
    for step in range(1, 100):
        bar.update(step, [("loss", 1.0)])
    assert capsys.readouterr().out.count("\n") == 1  # only the first draw
    bar.update(100, [("loss", 0.5)])  # the final one is never skipped
    out = capsys.readouterr().out
    assert out.startswith("100/100 ━━━━━━━━━━━━━━━━━━━━ ") and out.endswith("loss: 0.5000\n")


def test_progbar_verbose_0_prints_nothing(capsys):
    bar = Progbar(5, verbose=0)
    for step in range(1, 6):
        bar.update(step, [("loss", 1.0)])
    assert capsys.readouterr().out == ""


def test_progbar_rejects_both_metric_lists():
    with pytest.raises(ValueError, match="stateful_metrics"):
        Progbar(5, stateful_metrics=["a"], stateless_metrics=["b"])


# ------------------------------------------------------ learning-rate callbacks


def test_reduce_lr_on_plateau():
    model = FakeModel()
    cb = C.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1, min_lr=0.002)
    history, _ = fit(model, [cb], loss_logs([1.0, 1.0, 1.0, 0.5, 0.5, 0.5]))
    # Logged before each epoch's reduction: 0.01 -> 0.005 -> 0.0025 -> (0.00125
    # clamped to min_lr) 0.002, which is then left alone.
    np.testing.assert_allclose(history.history["learning_rate"], [0.01, 0.01, 0.005, 0.0025, 0.0025, 0.002])
    assert model.optimizer.learning_rate == pytest.approx(0.002)


def test_reduce_lr_on_plateau_cooldown_and_max_mode():
    model = FakeModel()
    cb = C.ReduceLROnPlateau(monitor="val_accuracy", factor=0.1, patience=1, cooldown=2)
    history, _ = fit(model, [cb], loss_logs([0.5, 0.5, 0.5, 0.5, 0.5, 0.9], key="val_accuracy"))
    # Reduce at the end of epoch 1; epoch 2 is cooldown (no waiting counted);
    # epoch 3 counts again and reduces. Logged values precede each reduction.
    np.testing.assert_allclose(history.history["learning_rate"], [0.01, 0.01, 0.001, 0.001, 0.0001, 0.0001])
    assert model.optimizer.learning_rate == pytest.approx(0.0001)

    model = FakeModel()
    fit(model, [C.ReduceLROnPlateau(monitor="val_accuracy", factor=0.1, patience=1, cooldown=0)], loss_logs([0.5] * 5, key="val_accuracy"))
    assert model.optimizer.learning_rate == pytest.approx(0.01 * 0.1**4)


def test_reduce_lr_on_plateau_rejects_factor_above_one():
    with pytest.raises(ValueError, match="factor"):
        C.ReduceLROnPlateau(factor=1.5)


def test_learning_rate_scheduler(capsys):
    model = FakeModel()
    cb = C.LearningRateScheduler(lambda epoch, lr: lr if epoch < 1 else lr * 0.5, verbose=1)
    history, _ = fit(model, [cb], loss_logs([1.0, 1.0, 1.0]))
    np.testing.assert_allclose(history.history["learning_rate"], [0.01, 0.005, 0.0025])
    assert "Epoch 2: LearningRateScheduler setting learning rate to 0.005." in capsys.readouterr().out

    model = FakeModel()
    fit(model, [C.LearningRateScheduler(lambda epoch: 0.1 / (epoch + 1))], loss_logs([1.0, 1.0]))
    assert model.optimizer.learning_rate == pytest.approx(0.05)


def test_learning_rate_scheduler_errors():
    model = FakeModel()
    with pytest.raises(ValueError, match="should be a finite float"):
        fit(model, [C.LearningRateScheduler(lambda epoch, lr: 1)], loss_logs([1.0]))

    def broken(epoch, lr):
        raise TypeError("bug inside the schedule")

    # A TypeError from inside the schedule is not mistaken for a signature mismatch.
    with pytest.raises(TypeError, match="bug inside"):
        fit(FakeModel(), [C.LearningRateScheduler(broken)], loss_logs([1.0]))
