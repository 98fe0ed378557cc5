"""Bad input gets a clear Python exception naming what is wrong; nothing crashes or hangs."""
import numpy as np
import pytest

import mdtrain as tf
from conftest import compile_mlp, make_mlp


@pytest.fixture
def model():
    return compile_mlp(make_mlp())


def test_wrong_input_shape_names_layer_and_shapes(model, blobs):
    x, y = blobs
    with pytest.raises(ValueError, match=r'layer "dense\w*" is incompatible.*value 20.*\(600, 21\)'):
        model.fit(np.zeros((600, 21), np.float32), y, verbose=0)
    with pytest.raises(ValueError, match=r"expected shape=\(None, 20\), found shape=\(5, 4, 5\)"):
        model.predict(np.zeros((5, 4, 5), np.float32))


def test_labels_out_of_range(model, blobs):
    x, y = blobs
    bad = y.copy()
    bad[17] = 3
    with pytest.raises(ValueError, match=r"label 3 at index 17 is out of range for 3 classes"):
        model.fit(x, bad, verbose=0)
    bad[17] = -1
    with pytest.raises(ValueError, match="out of range"):
        model.evaluate(x, bad, verbose=0)


def test_mismatched_lengths(model, blobs):
    x, y = blobs
    with pytest.raises(ValueError, match=r"same number of samples.*\(600, 20\).*\(599,\)"):
        model.fit(x, y[:-1], verbose=0)


@pytest.mark.parametrize("batch_size", [0, -3, 2.5, True])
def test_bad_batch_size(model, blobs, batch_size):
    x, y = blobs
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        model.fit(x, y, batch_size=batch_size, verbose=0)


def test_empty_data(model):
    with pytest.raises(ValueError, match="empty"):
        model.fit(np.zeros((0, 20), np.float32), np.zeros((0,), np.int32), verbose=0)
    with pytest.raises(ValueError, match="empty"):
        model.evaluate(np.zeros((0, 20), np.float32), np.zeros((0,), np.int32), verbose=0)
    assert model.predict(np.zeros((0, 20), np.float32)).shape == (0, 3)


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ValueError, match="known.*sparse_categorical_crossentropy"):
        tf.keras.losses.get("sparse_categorical_crossentropie")
    with pytest.raises(ValueError, match="Known optimizers: adagrad, adam"):
        tf.keras.optimizers.get("adamm")
    with pytest.raises(ValueError, match="unknown activation 'relux'.*known: linear, relu"):
        tf.keras.layers.Dense(3, activation="relux")
    with pytest.raises(ValueError, match="unknown initializer"):
        tf.keras.layers.Dense(3, kernel_initializer="glorot")
    model = make_mlp()
    with pytest.raises(ValueError, match="accuracy|known"):
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["acuracy"])
        model.fit(np.zeros((4, 20), np.float32), np.zeros(4, np.int32), verbose=0)


def test_bad_layer_arguments():
    with pytest.raises(ValueError, match="units"):
        tf.keras.layers.Dense(0)
    with pytest.raises(ValueError, match="rate"):
        tf.keras.layers.Dropout(1.5)
    with pytest.raises(TypeError, match="Unrecognized keyword arguments passed to Dense"):
        tf.keras.layers.Dense(3, unit=4)
    with pytest.raises(TypeError, match="must be an instance of class Layer"):
        tf.keras.Sequential([np.zeros(3)])


def test_layer_too_large_to_allocate():
    with pytest.raises(MemoryError, match=r'layer "big" \(Dense\).*cannot be allocated'):
        tf.keras.Sequential([tf.keras.layers.Dense(2**31, input_shape=(2**31,), name="big")])
    # Large enough to fail in malloc rather than in the size arithmetic (8 TiB of float32).
    with pytest.raises(MemoryError, match=r'layer "huge" \(Dense\).*cannot be allocated'):
        tf.keras.Sequential([tf.keras.layers.Dense(2**20, input_shape=(2**21,), name="huge")])


def test_compile_required(blobs):
    x, y = blobs
    with pytest.raises(RuntimeError, match="compile"):
        make_mlp().fit(x, y, verbose=0)
    with pytest.raises(ValueError, match="loss is required"):
        make_mlp().compile(optimizer="adam")


def test_bad_optimizer_hyperparameters():
    with pytest.raises(ValueError, match="learning_rate"):
        tf.keras.optimizers.Adam(learning_rate=-1.0)
    with pytest.raises(ValueError, match="beta_1"):
        tf.keras.optimizers.Adam(beta_1=1.5)
    with pytest.raises(ValueError):
        tf.keras.optimizers.SGD(clipnorm=1.0, global_clipnorm=1.0)


def test_non_numeric_input(model):
    with pytest.raises(TypeError, match="numbers"):
        model.predict(np.array([["a"] * 20]))


def test_fit_after_error_still_works(model, blobs):
    x, y = blobs
    with pytest.raises(ValueError):
        model.fit(x, y[:5], verbose=0)
    model.fit(x, y, epochs=1, verbose=0)
