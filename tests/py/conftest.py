import numpy as np
import pytest

import mdtrain as tf


@pytest.fixture
def logical_cpus():
    """Splits the CPU into n logical devices for one test: logical_cpus(4)."""
    cpu = tf.config.list_physical_devices("CPU")[0]

    def split(n):
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)

    yield split
    tf.config.set_logical_device_configuration(cpu, None)


@pytest.fixture
def blobs():
    """A small, learnable 3-class problem: (x float32 (600, 20), y int (600,))."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 20)) * 3
    y = rng.integers(0, 3, size=600)
    x = (centers[y] + rng.normal(size=(600, 20))).astype(np.float32)
    return x, y


def make_mlp(seed=0, hidden=16, classes=3, input_dim=20, dropout=None):
    tf.keras.utils.set_random_seed(seed)
    layers = [tf.keras.layers.Dense(hidden, activation="relu", input_shape=(input_dim,))]
    if dropout:
        layers.append(tf.keras.layers.Dropout(dropout))
    layers.append(tf.keras.layers.Dense(classes))
    return tf.keras.Sequential(layers)


def built_mlp():
    """make_mlp() compiled and built for 20 features: a model with weights, before any fit."""
    model = compile_mlp(make_mlp())
    model.build((None, 20))
    return model


def compile_mlp(model, **kwargs):
    model.compile(optimizer=kwargs.pop("optimizer", tf.keras.optimizers.Adam(0.01)),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=kwargs.pop("metrics", ["accuracy"]), **kwargs)
    return model


def fit_for_comparison(strategy, build_model, x, y, epochs, batch_size, optimizer="adam", metrics=None):
    """(model, per-epoch losses) of build_model() compiled and fit under strategy, in a fixed order
    (no shuffling): the run a split or pipelined strategy is compared with one device on."""
    with strategy.scope():
        model = build_model()
        model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=metrics)
    history = model.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0)
    return model, history.history["loss"]


def assert_same_training(got, want):
    """Two fit_for_comparison runs trained alike: losses and every weight to float32 rounding."""
    (model, loss), (ref, ref_loss) = got, want
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    assert len(model.get_weights()) == len(ref.get_weights())
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-6)
