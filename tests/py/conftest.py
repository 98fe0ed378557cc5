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


def compile_mlp(model, **kwargs):
    model.compile(optimizer=kwargs.pop("optimizer", tf.keras.optimizers.Adam(0.01)),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=kwargs.pop("metrics", ["accuracy"]), **kwargs)
    return model
