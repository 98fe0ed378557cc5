"""The activations the C++ step applies (Dense, Conv2D and Activation layers take them by name or
as keras.activations functions): every one's output and SGD steps against Keras 3 on TF (skipped
without it), against keras.activations on tensors, under MirroredStrategy, and in ONNX files."""
import importlib.util

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras
from mdtrain import _core

keras = tf.keras
L = keras.layers
A = keras.activations

STEP = ["linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "elu", "selu", "softplus", "softsign", "silu",
        "relu6", "hard_sigmoid", "hard_silu", "exponential", "mish", "leaky_relu", "log_sigmoid"]


def data(rows=24, features=6, units=4):
    rng = np.random.default_rng(3)
    # Inputs over [-2, 2] through kernels of [-0.6, 0.6]: pre-activations on both sides of every
    # kink (-3, 0, 3 and 6) with exponential's steps staying finite.
    return (rng.uniform(-2, 2, (rows, features)).astype(np.float32),
            rng.uniform(-1, 1, (rows, units)).astype(np.float32))


def dense_model(activation, seed=0):
    tf.keras.utils.set_random_seed(seed)
    model = keras.Sequential([L.Dense(4, activation=activation, input_shape=(6,),
                                      kernel_initializer=keras.initializers.RandomUniform(-0.6, 0.6, seed=seed))])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model


def test_the_step_applies_every_keras_activation_of_a_layer():
    assert _core.activation_names() == STEP
    for name in STEP:
        assert A.get(name).__name__ == name or name == "linear"


@pytest.fixture(scope="module")
def keras_runs(tmp_path_factory):
    """Keras's predictions and weights after 3 SGD epochs of Dense(4, activation=name), from our
    initial weights."""
    tmp = tmp_path_factory.mktemp("step_act")
    x, y = data()
    np.save(tmp / "x.npy", x)
    np.save(tmp / "y.npy", y)
    for name in STEP:
        np.savez(tmp / f"w0_{name}.npz", *dense_model(name).get_weights())
    run_keras(f"""
        import numpy as np, keras
        x, y = np.load("x.npy"), np.load("y.npy")
        for name in {STEP!r}:
            w0 = np.load(f"w0_{{name}}.npz")
            m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, activation=name)])
            m.set_weights([w0["arr_0"], w0["arr_1"]])
            out = m.predict(x, verbose=0)
            m.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
            h = m.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
            np.savez(f"keras_{{name}}.npz", out, *m.get_weights(), np.array(h.history["loss"]))
    """, tmp, timeout=600)
    return tmp


@pytest.mark.parametrize("name", STEP)
def test_dense_output_and_sgd_steps_match_keras(keras_runs, name):
    x, y = data()
    model = dense_model(name)
    theirs = np.load(keras_runs / f"keras_{name}.npz")
    np.testing.assert_allclose(model.predict(x, verbose=0), theirs["arr_0"], rtol=2e-6, atol=2e-6, err_msg=name)
    history = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"]).all() and history.history["loss"][-1] < history.history["loss"][0]
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(w, theirs[f"arr_{i + 1}"], rtol=2e-5, atol=2e-6, err_msg=f"{name} weight {i}")
    np.testing.assert_allclose(history.history["loss"], theirs["arr_3"], rtol=2e-5, err_msg=name)


@pytest.mark.parametrize("name", STEP)
def test_activation_layer_equals_keras_activations_on_tensors(name):
    x, _ = data()
    layer_out = keras.Sequential([L.Activation(name, input_shape=(6,))]).predict(x, verbose=0)
    np.testing.assert_allclose(layer_out, np.asarray(A.get(name)(x)), rtol=3e-6, atol=3e-6, err_msg=name)


def test_layers_take_keras_spellings_and_functions():
    assert L.Dense(3, activation="swish").get_config()["activation"] == "silu"
    assert L.Dense(3, activation=A.swish).get_config()["activation"] == "silu"
    assert L.Activation(A.hard_swish).get_config()["activation"] == "hard_silu"
    assert L.Conv2D(2, 3, activation="mish").get_config()["activation"] == "mish"
    with pytest.raises(ValueError, match=r'Dense "d": .*unknown activation .nope.; known: linear, relu'):
        L.Dense(3, activation="nope", name="d")


def test_a_cnn_with_the_new_activations_trains_alike_on_two_devices(logical_cpus):
    logical_cpus(2)
    rng = np.random.default_rng(5)
    x = rng.random((32, 8, 8, 1), dtype=np.float32)
    y = rng.integers(0, 3, 32)

    def build():
        tf.keras.utils.set_random_seed(1)
        m = keras.Sequential([L.Conv2D(4, 3, activation="mish", input_shape=(8, 8, 1)), L.Flatten(),
                              L.Dense(8, activation="selu"), L.Activation("hard_silu"), L.Dense(3)])
        m.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m
    one = build()
    one.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
        two = build()
    two.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(one.get_weights(), two.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not np.allclose(one.get_weights()[0], build().get_weights()[0])  # it trained


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")
def test_onnx_files_compute_every_activation(tmp_path):
    import onnxruntime
    x, _ = data()
    for name in STEP:
        model = dense_model(name)
        path = tmp_path / f"{name}.onnx"
        model.export(str(path), format="onnx", verbose=False)
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = session.run(None, {session.get_inputs()[0].name: x})[0]
        np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=1e-5, atol=1e-5, err_msg=name)
