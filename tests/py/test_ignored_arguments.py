"""Issue 34, class 8: no argument is accepted and dropped. sample_weight / class_weight of
train_on_batch and test_on_batch are applied (tests/py/test_sample_weights.py), and bad ones are
refused before anything changes; Checkpoint.restore's status checks what was restored, as TF's;
and the other arguments the sweep found are either applied or refused naming the argument."""
import os

import numpy as np
import pytest

import mdtrain as tf
from conftest import built_mlp, compile_mlp, make_mlp

keras = tf.keras


@pytest.fixture
def model():
    return built_mlp()


def snapshot(model):
    return [w.copy() for w in model.get_weights()]


def assert_unchanged(model, before):
    for a, b in zip(model.get_weights(), before):
        assert a.tobytes() == b.tobytes()


# ---- train_on_batch / test_on_batch ---------------------------------------------------------------

def test_train_on_batch_refuses_bad_weights_and_changes_nothing(model, blobs):
    x, y = blobs[0][:32], blobs[1][:32]
    before = snapshot(model)
    with pytest.raises(ValueError, match="cannot `class_weight` and `sample_weight` at the same time"):
        model.train_on_batch(x, y, sample_weight=np.ones(32), class_weight={0: 1.0})
    with pytest.raises(ValueError, match="'sample_weight' sizes: 31"):
        model.train_on_batch(x, y, sample_weight=np.ones(31))
    assert_unchanged(model, before)
    assert model.optimizer.iterations.numpy() == 0  # no step ran
    model.train_on_batch(x, y, sample_weight=np.ones(32))  # well-formed weights: a step
    assert model.optimizer.iterations.numpy() == 1


def test_weights_change_what_test_on_batch_reports(model, blobs):
    x, y = blobs[0][:32], blobs[1][:32]
    plain = model.test_on_batch(x, y)[0]
    assert model.test_on_batch(x, y, sample_weight=np.full(32, 2.0, np.float32))[0] == pytest.approx(2 * plain)


def test_fit_validation_steps_evaluates_that_many_batches(model, blobs):
    x, y = blobs
    xv, yv = x[:300], y[:300]
    history = model.fit(x, y, batch_size=100, epochs=1, verbose=0, shuffle=False, validation_data=(xv, yv),
                        validation_batch_size=50, validation_steps=2)
    first_two = model.evaluate(xv[:100], yv[:100], batch_size=50, verbose=0, return_dict=True)
    whole = model.evaluate(xv, yv, batch_size=50, verbose=0, return_dict=True)
    assert history.history["val_loss"][0] == pytest.approx(first_two["loss"], rel=1e-6)
    assert whole["loss"] != pytest.approx(first_two["loss"], rel=1e-6)  # the two differ on this data
    with pytest.raises(ValueError, match="validation_steps"):
        model.fit(x, y, validation_data=(xv, yv), validation_steps=0, verbose=0)


# ---- Checkpoint.restore(...) status ------------------------------------------------------------

def test_assert_consumed_raises_on_a_partial_restore_naming_what_was_left(tmp_path, model, blobs):
    model.fit(*blobs, batch_size=100, epochs=1, verbose=0)
    step = tf.Variable(7, dtype="int64")
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer, step=step).write(str(tmp_path / "c"))
    # An uncompiled model of the same architecture and no step: the optimizer's variables and the
    # step in the file go unrestored.
    bare = make_mlp()
    bare.build((None, 20))
    status = tf.train.Checkpoint(model=bare).restore(path)
    with pytest.raises(AssertionError) as e:
        status.assert_consumed()
    message = str(e.value)
    assert "/checkpoint/step" in message and "/optimizer/vars/0" in message and "c.weights.h5" in message
    assert "/layers/" not in message  # the layers were restored
    status.assert_existing_objects_matched()  # every object of the checkpoint got its value
    assert status.expect_partial() is status
    for a, b in zip(bare.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    # The whole checkpoint into the same objects: consumed.
    tf.train.Checkpoint(model=model, optimizer=model.optimizer, step=step).restore(path).assert_consumed()


def test_objects_without_a_value_fail_both_assertions(tmp_path, model):
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "c"))
    step = tf.Variable(3, dtype="int64")
    status = tf.train.Checkpoint(model=model, step=step).restore(path)
    assert int(step.numpy()) == 3  # left as it was
    for check in (status.assert_existing_objects_matched, status.assert_consumed):
        with pytest.raises(AssertionError, match="'step'"):
            check()


def test_restore_of_none_and_deferred_restore(tmp_path, model):
    status = tf.train.Checkpoint(model=model).restore(None)
    with pytest.raises(AssertionError, match="No checkpoint specified"):
        status.assert_consumed()
    with pytest.raises(AssertionError, match="No checkpoint specified"):
        status.assert_existing_objects_matched()
    status.expect_partial()
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(str(tmp_path / "c"))
    layers = keras.layers
    later = compile_mlp(keras.Sequential([layers.Dense(16, activation="relu"), layers.Dense(3)]))  # not built
    status = tf.train.Checkpoint(model=later, optimizer=later.optimizer).restore(path)
    with pytest.raises(AssertionError, match="not built yet"):
        status.assert_consumed()
    later.build((None, 20))
    status.assert_consumed()
    for a, b in zip(later.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


# ---- the rest of the sweep ---------------------------------------------------------------------

def test_compile_refuses_run_eagerly_and_checks_the_others(model):
    with pytest.raises(NotImplementedError, match="run_eagerly"):
        model.compile(optimizer="adam", loss="mse", run_eagerly=True)
    with pytest.raises(ValueError, match="jit_compile"):
        model.compile(optimizer="adam", loss="mse", jit_compile="xla")
    with pytest.raises(ValueError, match="auto_scale_loss"):
        model.compile(optimizer="adam", loss="mse", auto_scale_loss="yes")


def test_model_arguments_refused_not_dropped(tmp_path, model):
    with pytest.raises(NotImplementedError, match="skip_mismatch"):
        model.load_weights(str(tmp_path / "absent.weights.h5"), skip_mismatch=True)
    with pytest.raises(TypeError, match="save_format"):
        model.save(str(tmp_path / "m.keras"), save_format="h5")
    assert not os.path.exists(tmp_path / "m.keras")
    with pytest.raises(NotImplementedError, match="mask"):
        model(np.ones((2, 20), np.float32), mask=np.ones((2,), bool))
    with pytest.raises(TypeError, match="unexpected keyword"):
        model(np.ones((2, 20), np.float32), foo=1)
    model.save(str(tmp_path / "m.keras"))
    # custom_objects the file does not use are unused, as in Keras; a non-dict is refused.
    keras.models.load_model(str(tmp_path / "m.keras"), custom_objects={"MyLayer": object})
    with pytest.raises(TypeError, match="custom_objects"):
        keras.models.load_model(str(tmp_path / "m.keras"), custom_objects=["MyLayer"])


def test_summary_line_length_and_refused_options(model, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    lines = []
    model.summary(line_length=90, print_fn=lines.append)
    table = [line for line in lines if line[:1] in "┏┃┡│├└"]
    assert table and all(len(line) == 90 for line in table)
    monkeypatch.setenv("COLUMNS", "80")  # a console narrower than the table cuts it, as rich does for Keras
    lines = []
    model.summary(line_length=90, print_fn=lines.append)
    assert all(len(line) == 80 for line in lines if line[:1] in "┏┃┡│├└")
    with pytest.raises(NotImplementedError, match="expand_nested"):
        model.summary(expand_nested=True, print_fn=lines.append)
    with pytest.raises(TypeError, match="colour"):
        model.summary(colour=True)


def test_layer_arguments_refused_not_dropped():
    layers = keras.layers
    x = np.ones((2, 4), np.float32)
    with pytest.raises(TypeError, match="mask"):
        layers.Dense(3)(x, mask=np.ones((2,), bool))
    with pytest.raises(TypeError, match="foo"):
        layers.Add()([x, x], foo=1)
    with pytest.raises(ValueError, match="channels_first"):
        layers.Flatten(data_format="channels_first")
    with pytest.raises(ValueError, match="use_cudnn=True"):
        layers.LSTM(3, use_cudnn=True)
    with pytest.raises(ValueError, match="use_cudnn=True"):
        layers.GRU(3, use_cudnn=True)
    with pytest.raises(NotImplementedError, match="sparse"):
        layers.InputLayer(shape=(4,), sparse=True)
    with pytest.raises(TypeError, match="ragged"):
        layers.InputLayer(shape=(4,), ragged=True)
    assert layers.InputLayer(batch_shape=(None, 4)).shape == (4,)
    layers.LSTM(3, use_cudnn=False)
    layers.Flatten(data_format="channels_last")


def test_optimizer_metric_and_strategy_arguments_refused_not_dropped(model):
    variable = tf.Variable(np.ones(3, np.float32))
    optimizer = keras.optimizers.SGD(0.1)
    with pytest.raises(NotImplementedError, match="skip_gradients_aggregation"):
        optimizer.apply_gradients([(np.ones(3, np.float32), variable)], skip_gradients_aggregation=True)
    with pytest.raises(NotImplementedError, match="experimental_aggregate_gradients"):
        optimizer.apply_gradients([(np.ones(3, np.float32), variable)], experimental_aggregate_gradients=False)
    with pytest.raises(TypeError, match="colour"):
        optimizer.apply_gradients([(np.ones(3, np.float32), variable)], colour=1)
    np.testing.assert_array_equal(variable.numpy(), np.ones(3))  # nothing applied
    with pytest.raises(NotImplementedError, match="dtype='float16'"):
        keras.metrics.Mean(dtype="float16")
    keras.metrics.Mean(dtype="float32")
    strategy = tf.distribute.MirroredStrategy()
    with pytest.raises(NotImplementedError, match="InputOptions"):
        strategy.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(2), options=object())
    with pytest.raises(NotImplementedError, match="InputOptions"):
        strategy.distribute_datasets_from_function(lambda ctx: tf.data.Dataset.range(4).batch(2), options=object())
