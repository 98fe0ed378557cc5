"""Layers built from Python go through the same config path as model files (issue #11).

Python turns each layer's arguments into its Keras config and C++ builds the layer from it
(_core.layer_from_config). These tests pin that nothing changed on the way: the same models, built
from Python, have bit for bit the initial weights, and exactly the configs (every setting, dropout
seeds included) and names, recorded before the change (data/layer_golden.npz, written by
`python -c "import test_layer_config_path as t; t.write_golden()"` from tests/py with mdtrain at
commit d9c7b9e, when every layer had its own binding constructor; rewritten for issue 34, whose
fixes change these two models' initial weights and Dropout seeds on purpose: layers without
weights no longer shift the seeds of the weights (Dropout draws from its own stream, Flatten /
Reshape / pooling take no seed index) and RandomNormal(seed=3) now uses its seed, which its
config keeps); and a model file written by that version still loads (data/legacy_model.mdt, see
data/make_legacy_model.py).

Only values that do not depend on the CPU are recorded: initializers draw from mdtrain's own
generator, while anything trained or predicted goes through BLAS kernels that differ between CPU
models (scripts/golden_weights.py compares trained weights bitwise on one machine).
"""
import json
import os

import numpy as np
import pytest

import mdtrain as tf

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
layers = tf.keras.layers
regularizers = tf.keras.regularizers


def _models():
    """(name, model, input shape) for models that together use every layer and most arguments."""
    tf.keras.backend.clear_session()  # automatic names start again whatever ran before
    tf.keras.utils.set_random_seed(1234)
    yield "cnn", tf.keras.Sequential([
        layers.Conv2D(4, (3, 2), strides=(1, 2), padding="same", activation="relu", input_shape=(8, 8, 3),
                      kernel_initializer="he_normal", bias_initializer="ones",
                      kernel_regularizer=regularizers.l2(1e-3)),
        layers.BatchNormalization(momentum=0.8, epsilon=1e-4, center=False),
        layers.Conv2D(3, 2, dilation_rate=2, use_bias=False, kernel_regularizer=regularizers.l1_l2(1e-4, 1e-3)),
        layers.MaxPooling2D(pool_size=2, strides=1, padding="same"),
        layers.AveragePooling2D(),
        layers.GlobalAveragePooling2D(keepdims=True),
        layers.Reshape((-1,)),
        layers.Dropout(0.3),
        layers.Dense(5, activation="gelu", kernel_initializer=tf.keras.initializers.RandomNormal(stddev=0.2, seed=3),
                     bias_regularizer="l2"),
        layers.LayerNormalization(epsilon=1e-5, scale=False, beta_initializer="ones"),
        layers.Dropout(0.1, seed=77),
        layers.Dense(3),
        layers.Activation("softmax"),
    ]), (8, 8, 3)
    yield "mlp", tf.keras.Sequential([
        layers.Flatten(input_shape=(4, 5)),
        layers.Dense(16, activation="relu"),
        layers.BatchNormalization(synchronized=True, gamma_initializer="zeros"),
        layers.Dropout(0.5),
        layers.Dense(3, activation="softmax", use_bias=False),
    ]), (4, 5)


def _built_state():
    """{key: array} of every model's layer configs (as JSON text), layer names and initial weights."""
    state = {}
    for name, model, _ in _models():
        state[f"{name}/config"] = np.array(json.dumps([layer.get_config() for layer in model.layers]))
        state[f"{name}/names"] = np.array([layer.name for layer in model.layers])
        for i, w in enumerate(model.get_weights()):
            state[f"{name}/initial/{i}"] = w
    return state


def write_golden():
    np.savez(os.path.join(DATA, "layer_golden.npz"), **_built_state())


def test_models_built_from_python_match_the_binding_constructors():
    golden = np.load(os.path.join(DATA, "layer_golden.npz"))
    state = _built_state()
    assert sorted(state) == sorted(golden.files)
    for key in golden.files:
        if key.endswith("/config") or key.endswith("/names"):
            assert state[key].tolist() == golden[key].tolist(), key
        else:
            assert state[key].dtype == golden[key].dtype, key
            assert state[key].tobytes() == golden[key].tobytes(), key


def test_a_model_file_written_before_nlohmann_json_loads_bitwise():
    model = tf.keras.models.load_model(os.path.join(DATA, "legacy_model.mdt"))
    saved = np.load(os.path.join(DATA, "legacy_model_weights.npz"))
    weights = model.get_weights()
    expected = [saved[f"arr_{i}"] for i in range(len(weights))]
    assert len([f for f in saved.files if f.startswith("arr_")]) == len(weights)
    for w, e in zip(weights, expected):
        assert w.tobytes() == e.tobytes()
    assert [l.name for l in model.layers][:3] == ["conv2d", "batch_normalization", "max_pooling2d"]
    assert model.layers[1].momentum == 0.9
    # Predictions go through BLAS: equal up to rounding on another CPU, bitwise on the one that wrote them.
    np.testing.assert_allclose(model.predict(saved["x"], verbose=0), saved["predictions"], rtol=1e-5, atol=1e-6)
    # It still trains (the optimizer state came back too).
    model.fit(saved["x"], np.zeros(8, dtype=np.int64), batch_size=4, epochs=1, verbose=0)
