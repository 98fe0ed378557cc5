"""Freezing, as Keras does it: layer.trainable = False and model.trainable = False. A frozen
layer's weights do not change in fit, they are non-trainable weights, a frozen BatchNormalization
normalizes with its moving statistics in training too (and leaves them alone), and a change takes
effect when the model is compiled again. Against Keras 3 on TF (skipped without it): Keras trains
the same model, from mdtrain's .keras file, with the same layers frozen; losses and weights after
SGD epochs match, then again after unfreezing and recompiling. The trainable flag is saved."""
import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

keras = tf.keras
L = keras.layers


def data(rows=32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, 6)).astype(np.float32), rng.normal(size=(rows, 2)).astype(np.float32)


def model_of(seed=0):
    """Dense -> BatchNormalization -> Dense -> Dense, SGD on mse."""
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((6,)), L.Dense(5, name="first"), L.BatchNormalization(name="norm"),
                              L.Dense(4, activation="tanh", name="middle"), L.Dense(2, name="last")])
    return model


def compiled(model):
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model


def test_a_frozen_layer_keeps_its_weights_and_the_others_train():
    x, y = data()
    model = model_of()
    model.get_layer("first").trainable = False
    compiled(model)
    before = {layer.name: [w.copy() for w in layer.get_weights()] for layer in model.layers}
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for w, b in zip(model.get_layer("first").get_weights(), before["first"]):
        np.testing.assert_array_equal(w, b)
    for name in ("middle", "last"):
        assert not np.allclose(model.get_layer(name).get_weights()[0], before[name][0]), name
    assert len(model.trainable_weights) == 2 + 2 + 2  # norm's gamma/beta, middle's and last's kernels and biases
    assert len(model.non_trainable_weights) == 2 + 2  # first's kernel and bias, norm's moving statistics
    assert model.get_layer("first").trainable_weights == []


def test_a_frozen_batch_normalization_uses_and_keeps_its_moving_statistics():
    x, y = data()
    model = model_of()
    norm = model.get_layer("norm")
    norm.set_weights([np.full(5, 1.5, np.float32), np.full(5, 0.25, np.float32),
                      np.linspace(-1, 1, 5).astype(np.float32), np.full(5, 2.0, np.float32)])
    norm.trainable = False
    compiled(model)
    stats = [w.copy() for w in norm.get_weights()]
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for w, b in zip(norm.get_weights(), stats):
        np.testing.assert_array_equal(w, b)
    # training=True on a frozen BatchNormalization is inference: the moving statistics normalize
    h = model.get_layer("first")(x).numpy()
    expected = 1.5 * (h - stats[2]) / np.sqrt(stats[3] + norm.get_config()["epsilon"]) + 0.25
    np.testing.assert_allclose(norm(h, training=True).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_model_trainable_false_freezes_every_layer_until_unfrozen():
    x, y = data()
    model = model_of()
    model.trainable = False
    assert all(not layer.trainable for layer in model.layers)
    assert model.trainable_weights == []
    compiled(model)
    before = [w.copy() for w in model.get_weights()]
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for w, b in zip(model.get_weights(), before):
        np.testing.assert_array_equal(w, b)
    model.trainable = True
    compiled(model)
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert not np.allclose(model.get_layer("last").get_weights()[0], before[-2])


def test_a_change_takes_effect_at_the_next_compile():
    x, y = data()
    model = compiled(model_of())
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    model.get_layer("last").trainable = False
    compiled(model)
    kept = [w.copy() for w in model.get_layer("last").get_weights()]
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for w, b in zip(model.get_layer("last").get_weights(), kept):
        np.testing.assert_array_equal(w, b)


def test_trainable_is_saved_and_checked(tmp_path):
    model = model_of()
    model.get_layer("middle").trainable = False
    assert model.get_layer("middle").get_config()["trainable"] is False
    for path in (tmp_path / "m.keras", tmp_path / "m.mdtrain"):
        model.save(path)
        loaded = keras.models.load_model(path)
        assert [layer.trainable for layer in loaded.layers] == [True, True, False, True], path
    with pytest.raises(TypeError, match="trainable must be True or False"):
        model.get_layer("first").trainable = "no"
    with pytest.raises(TypeError, match="trainable must be True or False"):
        keras.Sequential([L.Dense(2)], trainable=None)
    assert keras.Sequential([keras.Input((3,)), L.Dense(2)], trainable=False).trainable_weights == []


def test_freezing_trains_as_keras_does_then_unfreezing(tmp_path):
    x, y = data()
    model = model_of()
    model.save(tmp_path / "ours.keras")
    np.savez(tmp_path / "data.npz", x=x, y=y)
    run_keras("""
        import numpy as np, keras
        d = np.load("data.npz")
        m = keras.models.load_model("ours.keras", compile=False)
        m.get_layer("first").trainable = False
        m.get_layer("norm").trainable = False
        m.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        h1 = m.fit(d["x"], d["y"], batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
        w1 = m.get_weights()
        m.get_layer("first").trainable = True
        m.get_layer("norm").trainable = True
        m.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        h2 = m.fit(d["x"], d["y"], batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
        np.savez("keras.npz", np.array(h1 + h2), *w1, *m.get_weights())
    """, tmp_path)
    theirs = np.load(tmp_path / "keras.npz")
    model.get_layer("first").trainable = False
    model.get_layer("norm").trainable = False
    compiled(model)
    h1 = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    w1 = model.get_weights()
    model.get_layer("first").trainable = True
    model.get_layer("norm").trainable = True
    compiled(model)
    h2 = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h1 + h2, theirs["arr_0"], rtol=1e-5)
    count = len(w1)
    for i, w in enumerate(w1 + model.get_weights()):
        np.testing.assert_allclose(w, theirs[f"arr_{i + 1}"], rtol=1e-5, atol=1e-6,
                                   err_msg=f"weight {i % count} after {'unfreezing' if i >= count else 'freezing'}")


def test_two_replicas_train_a_frozen_model_as_one(logical_cpus):
    logical_cpus(2)
    x, y = data()
    weights = []
    for devices in (["/cpu:0"], ["/cpu:0", "/cpu:1"]):
        with tf.distribute.MirroredStrategy(devices).scope():
            model = model_of()
            model.get_layer("norm").trainable = False
            model.get_layer("first").trainable = False
            compiled(model)
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        weights.append(model.get_weights())
    for a, b in zip(*weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
