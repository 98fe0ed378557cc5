"""Keras 3 files both ways: .keras archives and .weights.h5, checked against Keras itself."""
import json
import os
import zipfile

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

L = tf.keras.layers


def seed_mlp():
    return [L.Dense(128, activation="relu", input_shape=(20,)), L.Dense(10)]


def cnn():
    return [L.Conv2D(4, 3, activation="relu", input_shape=(8, 8, 2)), L.MaxPooling2D(), L.Flatten(), L.Dense(10)]


def bn_dropout():
    return [L.Dense(32, input_shape=(20,)), L.BatchNormalization(), L.Activation("relu"), L.Dropout(0.3),
            L.Dense(10)]


def data(input_shape, n=64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, *input_shape)).astype(np.float32), rng.integers(0, 10, size=n)


def trained(layers, optimizer=None, seed=0):
    tf.keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential(layers)
    model.compile(optimizer=optimizer or tf.keras.optimizers.Adam(0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    x, y = data(model.input_shape[1:])
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    return model, x, y


MODELS = {"mlp": seed_mlp, "cnn": cnn, "bn_dropout": bn_dropout}


# ---- mdtrain on its own -------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_keras_archive_round_trip_keeps_predictions_and_optimizer_state(tmp_path, kind):
    model, x, y = trained(MODELS[kind]())
    model.save(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        assert {"config.json", "metadata.json", "model.weights.h5"} <= set(z.namelist())
        config = json.loads(z.read("config.json"))
    assert config["class_name"] == "Sequential" and config["compile_config"]["optimizer"]["class_name"] == "Adam"
    loaded = tf.keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    for (name, a), (other, b) in zip(model._core.optimizer_state(), loaded._core.optimizer_state()):
        assert name == other
        np.testing.assert_array_equal(a, b)
    assert loaded.optimizer.iterations == model.optimizer.iterations


@pytest.mark.parametrize("optimizer", [lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9),
                                       lambda: tf.keras.optimizers.RMSprop(momentum=0.5, centered=True),
                                       lambda: tf.keras.optimizers.Adagrad(), lambda: tf.keras.optimizers.AdamW()])
def test_weights_h5_round_trip_for_each_optimizer(tmp_path, optimizer):
    model, x, y = trained(seed_mlp(), optimizer())
    model.save_weights(tmp_path / "w.weights.h5")
    fresh, _, _ = trained(seed_mlp(), optimizer(), seed=1)
    fresh.load_weights(tmp_path / "w.weights.h5")
    np.testing.assert_array_equal(fresh.predict(x, verbose=0), model.predict(x, verbose=0))
    model.train_on_batch(x[:16], y[:16])
    fresh.train_on_batch(x[:16], y[:16])
    for a, b in zip(model.get_weights(), fresh.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_native_format_stays_for_other_extensions(tmp_path):
    model, x, _ = trained(seed_mlp())
    model.save(tmp_path / "m.mdtrain")
    assert (tmp_path / "m.mdtrain").read_bytes()[:8] == b"MDTRAIN\0"
    np.testing.assert_array_equal(tf.keras.models.load_model(tmp_path / "m.mdtrain").predict(x, verbose=0),
                                  model.predict(x, verbose=0))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "no_config"])
def test_damaged_keras_file_is_a_clear_error(tmp_path, damage):
    model, _, _ = trained(seed_mlp())
    path = tmp_path / "m.keras"
    model.save(path)
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a zip at all" * 10)
    else:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("metadata.json", "{}")
    with pytest.raises(ValueError, match="m.keras"):
        tf.keras.models.load_model(path)


def test_damaged_weights_file_is_a_clear_error(tmp_path):
    model, _, _ = trained(seed_mlp())
    path = tmp_path / "w.weights.h5"
    model.save_weights(path)
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(ValueError, match="w.weights.h5"):
        model.load_weights(path)


def test_weights_of_another_architecture_are_refused(tmp_path):
    model, _, _ = trained(seed_mlp())
    model.save_weights(tmp_path / "w.weights.h5")
    other, _, _ = trained([L.Dense(64, activation="relu", input_shape=(20,)), L.Dense(10)])
    with pytest.raises(ValueError, match="shapes"):
        other.load_weights(tmp_path / "w.weights.h5")


@pytest.mark.parametrize("what", ["save", "save_weights"])
def test_failed_save_leaves_previous_file_intact(tmp_path, monkeypatch, what):
    from mdtrain.keras import _keras_weights

    model, _, _ = trained(seed_mlp())
    path = tmp_path / ("m.keras" if what == "save" else "w.weights.h5")
    getattr(model, what)(path)
    before = path.read_bytes()
    real_write = _keras_weights.write

    def fail_midway(model, target, **kwargs):
        real_write(model, target, **kwargs)
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(_keras_weights, "write", fail_midway)
    with pytest.raises(OSError, match="disk full"):
        getattr(model, what)(path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no temporary file left behind


def _edit_config(src, dst, edit):
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    config = json.loads(members["config.json"])
    edit(config)
    members["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(dst, "w") as z:
        for name, raw in members.items():
            z.writestr(name, raw)


@pytest.mark.parametrize("what,edit", [
    ("Conv1D", lambda c: c["config"]["layers"][1].update(class_name="Conv1D")),  # LSTM is supported since #15
    ("Nadam", lambda c: c["compile_config"]["optimizer"].update(class_name="Nadam")),
    ("Huber", lambda c: c["compile_config"]["loss"].update(class_name="Huber")),
    ("AUC", lambda c: c["compile_config"].update(metrics=[{"class_name": "AUC", "config": {}}])),
    ("renorm", lambda c: c["config"]["layers"][1]["config"].update(renorm=True)),
    ("Functional", lambda c: c.update(class_name="Functional")),
])
def test_unsupported_keras_objects_are_named(tmp_path, what, edit):
    model, _, _ = trained(seed_mlp())
    model.save(tmp_path / "m.keras")
    _edit_config(tmp_path / "m.keras", tmp_path / "bad.keras", edit)
    with pytest.raises(ValueError, match=what):
        tf.keras.models.load_model(tmp_path / "bad.keras")


def test_native_file_named_keras_still_loads(tmp_path):
    """Files mdtrain wrote with a .keras name before it wrote Keras archives."""
    model, x, _ = trained(seed_mlp())
    model._core.save(str(tmp_path / "old.keras"), "{}")
    np.testing.assert_array_equal(tf.keras.models.load_model(tmp_path / "old.keras").predict(x, verbose=0),
                                  model.predict(x, verbose=0))


def test_model_checkpoint_writes_keras_files(tmp_path):
    model, x, y = trained(seed_mlp())
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[
        tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "m_{epoch}.keras")),
        tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "w_{epoch}.weights.h5"), save_weights_only=True)])
    assert sorted(os.listdir(tmp_path)) == ["m_1.keras", "m_2.keras", "w_1.weights.h5", "w_2.weights.h5"]
    assert zipfile.is_zipfile(tmp_path / "m_2.keras")
    np.testing.assert_array_equal(tf.keras.models.load_model(tmp_path / "m_2.keras").predict(x, verbose=0),
                                  model.predict(x, verbose=0))


def test_optimizer_state_that_does_not_fit_is_skipped_with_a_warning(tmp_path):
    model, x, _ = trained(seed_mlp())
    model.save_weights(tmp_path / "w.weights.h5")
    other, _, _ = trained(seed_mlp(), tf.keras.optimizers.SGD(0.1, momentum=0.9))
    with pytest.warns(UserWarning, match="skipping the optimizer state"):
        other.load_weights(tmp_path / "w.weights.h5")
    np.testing.assert_array_equal(other.predict(x, verbose=0), model.predict(x, verbose=0))


def test_damaged_weights_inside_an_archive_name_the_archive(tmp_path):
    model, _, _ = trained(seed_mlp())
    model.save(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        members = {n: z.read(n) for n in z.namelist()}
    members["model.weights.h5"] = members["model.weights.h5"][:500]
    with zipfile.ZipFile(tmp_path / "bad.keras", "w") as z:
        for name, raw in members.items():
            z.writestr(name, raw)
    with pytest.raises(ValueError, match="bad.keras"):
        tf.keras.models.load_model(tmp_path / "bad.keras")


# ---- against Keras 3 ------------------------------------------------------------------------
KERAS_STEP = """
import numpy as np, keras
m = keras.models.load_model("{src}")
x, y = np.load("x.npy"), np.load("y.npy")
np.save("keras_pred.npy", m.predict(x, verbose=0))
w = keras.models.load_model("{src}")  # the same architecture, then the .weights.h5 file into it
w.load_weights("md.weights.h5")
np.save("keras_weights_pred.npy", w.predict(x, verbose=0))
m.train_on_batch(x[:16], y[:16])
np.savez("keras_after.npz", *[w.numpy() for w in m.weights])
m.save("{dst}")
"""


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_mdtrain_keras_file_loads_in_keras(tmp_path, kind):
    model, x, y = trained(MODELS[kind]())
    model.save(tmp_path / "md.keras")
    model.save_weights(tmp_path / "md.weights.h5")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run_keras(KERAS_STEP.format(src="md.keras", dst="back.keras"), tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "keras_pred.npy"), model.predict(x, verbose=0), atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "keras_weights_pred.npy"), model.predict(x, verbose=0), atol=1e-6)
    if kind == "bn_dropout":
        return  # a training step draws a dropout mask: the two libraries' masks differ
    model.train_on_batch(x[:16], y[:16])
    keras_after = np.load(tmp_path / "keras_after.npz")
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(keras_after[f"arr_{i}"], w, rtol=1e-5, atol=1e-6)
    # ... and Keras's file, one step further, comes back.
    back = tf.keras.models.load_model(tmp_path / "back.keras")
    for a, b in zip(back.get_weights(), model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert back.optimizer.iterations == model.optimizer.iterations


KERAS_LAYERS = {
    "mlp": 'keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)',
    "cnn": 'keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.MaxPooling2D(), keras.layers.Flatten(), '
           'keras.layers.Dense(10)',
    "bn_dropout": 'keras.layers.Dense(32), keras.layers.BatchNormalization(), keras.layers.Activation("relu"), '
                  'keras.layers.Dropout(0.3), keras.layers.Dense(10)',
}


@pytest.mark.parametrize("kind", sorted(KERAS_LAYERS))
def test_keras_trained_file_loads_in_mdtrain(tmp_path, kind):
    input_shape = (8, 8, 2) if kind == "cnn" else (20,)
    x, y = data(input_shape)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    layers = KERAS_LAYERS[kind]
    run_keras(f"""
        import numpy as np, keras
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input({input_shape!r}), {layers}])
        m.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        x, y = np.load("x.npy"), np.load("y.npy")
        m.fit(x, y, batch_size=16, epochs=1, verbose=0)
        m.save("k.keras")
        m.save_weights("k.weights.h5")
        np.save("keras_pred.npy", m.predict(x, verbose=0))
        m.train_on_batch(x[:16], y[:16])
        np.savez("keras_after.npz", *[w.numpy() for w in m.weights])
    """, tmp_path)
    model = tf.keras.models.load_model(tmp_path / "k.keras")
    np.testing.assert_allclose(model.predict(x, verbose=0), np.load(tmp_path / "keras_pred.npy"), atol=1e-6)
    same, _, _ = trained(MODELS[kind](), seed=3)
    same.load_weights(tmp_path / "k.weights.h5")
    np.testing.assert_allclose(same.predict(x, verbose=0), np.load(tmp_path / "keras_pred.npy"), atol=1e-6)
    if kind == "bn_dropout":
        return  # a training step draws a dropout mask: the two libraries' masks differ
    model.train_on_batch(x[:16], y[:16])
    keras_after = np.load(tmp_path / "keras_after.npz")
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(w, keras_after[f"arr_{i}"], rtol=1e-5, atol=1e-6)


def test_sgd_without_momentum_saves_a_file_keras_loads(tmp_path):
    model, x, y = trained(seed_mlp(), tf.keras.optimizers.SGD(0.05))
    assert isinstance(model.optimizer.get_config()["momentum"], float)
    model.save(tmp_path / "md.keras")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "pred.npy", model.predict(x, verbose=0))
    run_keras("""
        import numpy as np, keras
        m = keras.models.load_model("md.keras")
        assert isinstance(m.optimizer, keras.optimizers.SGD) and m.optimizer.momentum == 0.0
        np.testing.assert_allclose(m.predict(np.load("x.npy"), verbose=0), np.load("pred.npy"), atol=1e-6)
    """, tmp_path)


def test_schedule_and_sgd_momentum_continue_in_keras(tmp_path):
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=3, decay_rate=0.5)
    model, x, y = trained(seed_mlp(), tf.keras.optimizers.SGD(schedule, momentum=0.9))
    model.save(tmp_path / "md.keras")
    model.save_weights(tmp_path / "md.weights.h5")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run_keras(KERAS_STEP.format(src="md.keras", dst="back.keras"), tmp_path)
    model.train_on_batch(x[:16], y[:16])
    keras_after = np.load(tmp_path / "keras_after.npz")
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(keras_after[f"arr_{i}"], w, rtol=1e-5, atol=1e-6)
    back = tf.keras.models.load_model(tmp_path / "back.keras")
    assert back.optimizer.learning_rate.numpy() == pytest.approx(model.optimizer.learning_rate.numpy())


OTHER_LAYERS = ('keras.layers.Conv2D(4, 3, padding="same", strides=1), keras.layers.AveragePooling2D(2), '
                'keras.layers.LayerNormalization(), keras.layers.Activation("tanh"), '
                'keras.layers.GlobalAveragePooling2D(), keras.layers.Reshape((2, 2)), keras.layers.Flatten(), '
                'keras.layers.Dense(3, activation="softmax")')


def test_other_supported_layers_both_ways(tmp_path):
    """AveragePooling2D, LayerNormalization, Activation, GlobalAveragePooling2D, Reshape from Keras
    to mdtrain and back to Keras, predictions equal."""
    x, _ = data((8, 8, 2))
    np.save(tmp_path / "x.npy", x)
    run_keras(f"""
        import numpy as np, keras
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((8, 8, 2)), {OTHER_LAYERS}])
        m.compile(optimizer="rmsprop", loss="sparse_categorical_crossentropy")
        m.save("k.keras")
        np.save("keras_pred.npy", m.predict(np.load("x.npy"), verbose=0))
    """, tmp_path)
    model = tf.keras.models.load_model(tmp_path / "k.keras")
    assert [type(layer).__name__ for layer in model.layers] == [
        "Conv2D", "AveragePooling2D", "LayerNormalization", "Activation", "GlobalAveragePooling2D", "Reshape",
        "Flatten", "Dense"]
    np.testing.assert_allclose(model.predict(x, verbose=0), np.load(tmp_path / "keras_pred.npy"), atol=1e-6)
    model.save(tmp_path / "md.keras")
    run_keras("""
        import numpy as np, keras
        np.save("keras_pred2.npy", keras.models.load_model("md.keras").predict(np.load("x.npy"), verbose=0))
    """, tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "keras_pred2.npy"), model.predict(x, verbose=0), atol=1e-6)
