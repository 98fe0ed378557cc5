"""keras.layers.Embedding: the same outputs and SGD steps as Keras, integer inputs of any dtype
through fit/evaluate/predict, bad indices refused before training with the layer, value and
position named, files both ways, and the same weights under every data-parallel strategy."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

L = tf.keras.layers
HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "jobs", "embedding_job.py")

VOCAB, DIM, LENGTH, CLASSES = 20, 4, 5, 3


def data(n=48, seed=0, vocab=VOCAB):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, vocab, size=(n, LENGTH))
    x[:, 0] = 7  # a row every example uses: its gradient sums many contributions
    return x, rng.normal(size=(n, CLASSES)).astype(np.float32)


def embedding_model(seed=0, **embedding_kwargs):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([L.Embedding(VOCAB, DIM, input_shape=(LENGTH,), **embedding_kwargs), L.Flatten(),
                                L.Dense(CLASSES)])


def compiled(model, lr=0.1):
    model.compile(optimizer=tf.keras.optimizers.SGD(lr), loss="mse")
    return model


# ---- the layer ------------------------------------------------------------------------------
def test_output_is_the_table_rows_and_keeps_the_input_shape():
    layer = L.Embedding(10, 3)
    model = tf.keras.Sequential([layer])
    x = np.array([[[1, 2], [3, 9]], [[0, 0], [9, 4]]])
    out = model.predict(x, verbose=0)
    assert out.shape == (2, 2, 2, 3) and model.output_shape == (None, 2, 2, 3)
    table = layer.embeddings
    assert table.shape == (10, 3) and layer.get_weights()[0].shape == (10, 3)
    np.testing.assert_array_equal(out, table[x])
    # Keras's "uniform": RandomUniform(-0.05, 0.05).
    big = tf.keras.Sequential([L.Embedding(500, 40, input_shape=(1,))])
    w = big.get_weights()[0]
    assert -0.05 <= w.min() < -0.049 and 0.049 < w.max() < 0.05
    assert layer.get_config()["embeddings_initializer"] == {"class_name": "RandomUniform",
                                                             "config": {"minval": -0.05, "maxval": 0.05}}


def test_every_index_dtype_gives_the_same_training():
    x, y = data()
    runs = []
    for xs in (x, x.astype(np.int32), x.astype(np.int64), x.astype(np.uint16), x.astype(np.float32),
               x.astype(np.float64)):
        model = compiled(embedding_model())
        history = model.fit(xs, y, batch_size=16, epochs=2, verbose=0)
        runs.append((model.get_weights(), history.history["loss"], model.evaluate(xs, y, verbose=0),
                     model.predict(xs, verbose=0)))
    for weights, loss, evaluated, predicted in runs[1:]:
        for a, b in zip(weights, runs[0][0]):
            np.testing.assert_array_equal(a, b)
        assert loss == runs[0][1] and evaluated == runs[0][2]
        np.testing.assert_array_equal(predicted, runs[0][3])


def test_training_moves_only_the_rows_that_were_used():
    x, y = data()
    x[x == 3] = 4  # row 3 never appears
    model = compiled(embedding_model())
    before = model.get_weights()[0]
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    after = model.get_weights()[0]
    np.testing.assert_array_equal(after[3], before[3])
    assert not np.array_equal(after[7], before[7])


def test_dataset_and_validation_data_take_integer_indices():
    x, y = data()
    x_big = x.astype(np.int64)
    model = compiled(embedding_model())
    ds = tf.data.Dataset.from_tensor_slices((x_big, y)).batch(16)
    history = model.fit(ds, epochs=2, validation_data=(x_big[:8], y[:8]), verbose=0)
    ref = compiled(embedding_model())
    ref_history = ref.fit(x, y, batch_size=16, epochs=2, shuffle=False, validation_data=(x[:8], y[:8]), verbose=0)
    assert history.history == ref_history.history
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_float_models_still_take_float32_features():
    model = tf.keras.Sequential([L.Dense(2, input_shape=(3,))])
    x = np.array([[1, 2, 3]], dtype=np.int64)
    np.testing.assert_allclose(model.predict(x, verbose=0), x.astype(np.float32) @ model.get_weights()[0], rtol=1e-6)
    assert not model._reads_indices()


def test_config_round_trip_mask_zero_and_input_length():
    layer = L.Embedding(1000, 64, mask_zero=True, input_length=10, embeddings_regularizer="l2", name="words")
    config = layer.get_config()
    assert config["input_dim"] == 1000 and config["output_dim"] == 64 and config["mask_zero"] is True
    assert config["batch_input_shape"] == (None, 10)  # Keras 2's input_length declares the input shape
    again = L.Embedding.from_config(config)
    assert again.get_config() == config
    assert again.mask_zero and again.supports_masking and not L.Embedding(3, 2).supports_masking
    np.testing.assert_array_equal(layer.compute_mask(np.array([[0, 4, 0]])), [[False, True, False]])
    assert L.Embedding(3, 2).compute_mask(np.array([[0, 1]])) is None
    model = tf.keras.Sequential([layer])
    assert model.output_shape == (None, 10, 64)
    # The L2 penalty is on the whole table (one index per example: 2-D outputs).
    reg = tf.keras.Sequential([L.Embedding(300, 8, embeddings_regularizer="l2")])
    reg.compile(optimizer="sgd", loss="mse")
    x = np.array([3, 3, 0], dtype=np.int32)
    loss = reg.evaluate(x, np.zeros((3, 8), np.float32), verbose=0)  # builds it; weights unchanged
    table = reg.layers[0].embeddings.astype(np.float64)
    assert loss == pytest.approx(0.01 * np.sum(table ** 2) + np.mean(table[x] ** 2), rel=1e-5)


# ---- bad input ------------------------------------------------------------------------------
def test_index_out_of_range_names_the_layer_value_and_position_before_any_step():
    x, y = data()
    x[37, 2] = VOCAB
    model = compiled(embedding_model())
    before = model.get_weights()
    with pytest.raises(ValueError, match=r'\[embedding\] layer "embedding(_\d+)?": index 20 at position \(37, 2\) of '
                                         r"the input \(shape \(48, 5\)\) is outside \[0, 20\) \(input_dim=20\)"):
        model.fit(x, y, batch_size=16, verbose=0)
    for a, b in zip(model.get_weights(), before):  # not one step ran
        np.testing.assert_array_equal(a, b)
    assert model.optimizer.iterations == 0
    x[37, 2] = -1
    with pytest.raises(ValueError, match=r"index -1 at position \(37, 2\)"):
        model.evaluate(x, y, verbose=0)
    with pytest.raises(ValueError, match=r"index -1 at position \(37, 2\)"):
        model.predict(x, verbose=0)


def test_non_integral_float_index_is_refused():
    x, y = data()
    xf = x.astype(np.float32)
    xf[5, 1] = 2.5
    model = compiled(embedding_model())
    with pytest.raises(ValueError, match=r"index 2\.5 at position \(5, 1\) .* is not a whole number; indices must "
                                         r"be integers in \[0, 20\)"):
        model.fit(xf, y, verbose=0)
    xf[5, 1] = np.nan
    with pytest.raises(ValueError, match=r"index nan at position \(5, 1\)"):
        model.predict(xf, verbose=0)
    # float64 keeps its precision: 2**24 + 1 is not rounded to 2**24 on the way in.
    big = tf.keras.Sequential([L.Embedding(2 ** 24 + 1, 1, input_shape=(1,))])
    with pytest.raises(ValueError, match=r"index 16777217 at position \(0, 0\)"):
        big.predict(np.array([[2.0 ** 24 + 1]]), verbose=0)
    with pytest.raises(ValueError, match=r"does not fit in int32"):
        big.predict(np.array([[2 ** 40]]), verbose=0)


def test_bad_arguments_raise_value_errors():
    with pytest.raises(ValueError, match=r'\[embedding\] layer "e": input_dim must be a positive integer'):
        L.Embedding(0, 4, name="e")
    with pytest.raises(ValueError, match=r'\[embedding\] layer "e": output_dim must be a positive integer, got -1'):
        L.Embedding(4, -1, name="e")
    with pytest.raises(ValueError, match=r"`input_dim` must be a positive integer. Received: input_dim=2.5"):
        L.Embedding(2.5, 4)
    with pytest.raises(ValueError, match=r"`output_dim` must be a positive integer. Received: output_dim=True"):
        L.Embedding(4, True)
    with pytest.raises(ValueError, match=r'Embedding "e": embeddings_constraint is not supported'):
        L.Embedding(4, 2, embeddings_constraint="non_neg", name="e")
    with pytest.raises(ValueError, match=r"unknown initializer 'nope'"):
        L.Embedding(4, 2, embeddings_initializer="nope")


def test_an_embedding_after_another_layer_is_refused_naming_it():
    model = tf.keras.Sequential([L.Dense(3, input_shape=(2,), name="first")])
    with pytest.raises(ValueError, match=r'Embedding layer "late" must be the first layer of Sequential model .* '
                                         r'\(it follows "first"\): its inputs are integer indices, which are not '
                                         r"differentiable"):
        model.add(L.Embedding(5, 2, name="late"))
    with pytest.raises(ValueError, match='Embedding layer "late2" must be the first layer'):
        tf.keras.Sequential([L.Dense(3), L.Embedding(5, 2, name="late2")])


# ---- files ----------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".mdtrain", ".keras"])
def test_save_and_load_round_trip(tmp_path, suffix):
    x, y = data()
    model = compiled(embedding_model(mask_zero=True))
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    path = tmp_path / f"m{suffix}"
    model.save(path)
    loaded = tf.keras.models.load_model(path)
    assert isinstance(loaded.layers[0], L.Embedding) and loaded.layers[0].mask_zero
    assert loaded.layers[0].get_config() == {k: v for k, v in model.layers[0].get_config().items()
                                             if k != "batch_input_shape"}
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    # ... and trains on exactly as the original does.
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    loaded.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    weights = tmp_path / "w.weights.h5"
    model.save_weights(weights)
    fresh = compiled(embedding_model(seed=5, mask_zero=True))
    fresh.load_weights(weights)
    for a, b in zip(fresh.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


# ---- Keras as the oracle ----------------------------------------------------------------------
def test_same_output_and_sgd_steps_as_keras(tmp_path):
    x, y = data()
    model = compiled(embedding_model())
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.savez(tmp_path / "w0.npz", *model.get_weights())
    run_keras(f"""
        import numpy as np, keras
        x, y = np.load("x.npy"), np.load("y.npy")
        w0 = np.load("w0.npz")
        m = keras.Sequential([keras.Input(({LENGTH},), dtype="int32"), keras.layers.Embedding({VOCAB}, {DIM}),
                              keras.layers.Flatten(), keras.layers.Dense({CLASSES})])
        m.set_weights([w0[f"arr_{{i}}"] for i in range(3)])
        np.save("keras_out.npy", m.layers[0](x).numpy())
        m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        h = m.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
        np.savez("keras_after.npz", *m.get_weights())
        np.save("keras_loss.npy", np.array(h.history["loss"]))
    """, tmp_path)
    # Same table, same indices: the same output, bit for bit (a gather), and the table's rows.
    first = tf.keras.Sequential([L.Embedding(VOCAB, DIM, input_shape=(LENGTH,))])
    first.set_weights(model.get_weights()[:1])
    np.testing.assert_array_equal(np.load(tmp_path / "keras_out.npy"), first.predict(x, verbose=0))
    np.testing.assert_array_equal(first.predict(x, verbose=0), model.get_weights()[0][x])
    history = model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
    after = np.load(tmp_path / "keras_after.npz")
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(w, after[f"arr_{i}"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(history.history["loss"], np.load(tmp_path / "keras_loss.npy"), rtol=1e-5)


def test_keras_files_with_an_embedding_both_ways(tmp_path):
    x, y = data()
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run_keras(f"""
        import numpy as np, keras
        keras.utils.set_random_seed(0)
        x, y = np.load("x.npy"), np.load("y.npy")
        m = keras.Sequential([keras.Input(({LENGTH},), dtype="int32"),
                              keras.layers.Embedding({VOCAB}, {DIM}, mask_zero=True),
                              keras.layers.Flatten(), keras.layers.Dense({CLASSES})])
        m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        m.fit(x, y, batch_size=16, epochs=1, verbose=0)
        m.save("keras.keras")
        m.save_weights("keras.weights.h5")
        np.save("keras_pred.npy", m.predict(x, verbose=0))
    """, tmp_path)
    loaded = tf.keras.models.load_model(tmp_path / "keras.keras")
    assert isinstance(loaded.layers[0], L.Embedding) and loaded.layers[0].mask_zero
    np.testing.assert_allclose(loaded.predict(x, verbose=0), np.load(tmp_path / "keras_pred.npy"), rtol=1e-6,
                               atol=1e-7)
    weights_only = compiled(embedding_model(seed=3))
    weights_only.load_weights(tmp_path / "keras.weights.h5")
    np.testing.assert_allclose(weights_only.predict(x, verbose=0), np.load(tmp_path / "keras_pred.npy"), rtol=1e-6,
                               atol=1e-7)
    # mdtrain trains one more epoch and writes a .keras file; Keras reads it and predicts the same.
    # (Adam: mdtrain writes SGD's momentum as the integer 0, which Keras's SGD refuses.)
    loaded.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse")
    loaded.fit(x, y, batch_size=16, epochs=1, verbose=0)
    loaded.save(tmp_path / "md.keras")
    np.save(tmp_path / "md_pred.npy", loaded.predict(x, verbose=0))
    run_keras("""
        import numpy as np, keras
        m = keras.models.load_model("md.keras")
        assert m.layers[0].mask_zero and m.inputs[0].dtype == "int32", (m.layers[0].get_config(), m.inputs)
        np.save("keras_md_pred.npy", m.predict(np.load("x.npy"), verbose=0))
    """, tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "keras_md_pred.npy"), np.load(tmp_path / "md_pred.npy"), rtol=1e-6,
                               atol=1e-7)


# ---- strategies -----------------------------------------------------------------------------
def _train_under(strategy, x, y, weights, batch_size=12):
    with strategy.scope():
        model = compiled(embedding_model())
    model.set_weights(weights)
    model.fit(x, y, batch_size=batch_size, epochs=2, shuffle=False, verbose=0)
    return model


def test_mirrored_and_central_storage_train_the_one_device_weights(logical_cpus):
    x, y = data(n=50)  # 50 rows in batches of 12: an uneven last batch
    weights = embedding_model().get_weights()
    one = _train_under(tf.distribute.OneDeviceStrategy("/cpu:0"), x, y, weights)
    logical_cpus(2)
    for strategy in (tf.distribute.MirroredStrategy(), tf.distribute.experimental.CentralStorageStrategy()):
        model = _train_under(strategy, x, y, weights)
        assert model.distribute_strategy.num_replicas_in_sync == 2
        for a, b in zip(model.get_weights(), one.get_weights()):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)  # the replicas' sums round differently
        for r in range(model._core.num_replicas):  # replicas identical (ZeRO-1 gathers the table's shards)
            for a, b in zip(model._core.replica_weights(r), model.get_weights()):
                np.testing.assert_array_equal(a, b)


needs_mpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or not tf._core.mpi_available(),
    reason="needs mpirun and an mdtrain built with MPI (apt-get install openmpi-bin libopenmpi-dev, reinstall)")


@needs_mpi
def test_two_mpi_workers_train_the_weights_of_mirrored_on_two_devices(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mdtrain.launch", "-n", "2", JOB, "--out", str(tmp_path / "mw.npz")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([sys.executable, JOB, "--mirrored", "--out", str(tmp_path / "mirrored.npz")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with np.load(tmp_path / "mw.npz") as a, np.load(tmp_path / "mirrored.npz") as b:
        assert sorted(a.files) == sorted(b.files) == ["arr_0", "arr_1", "arr_2"]
        for k in a.files:  # both add the two replicas' gradients in rank order: the same bits
            np.testing.assert_array_equal(a[k], b[k])
