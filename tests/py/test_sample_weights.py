"""Keras's sample_weight and class_weight in fit, evaluate, train_on_batch and test_on_batch (arrays,
datasets yielding (x, y, sample_weight), validation data): losses, metrics and weights after SGD
steps against Keras 3 on TF (skipped without it), under MirroredStrategy as on one device, and the
refusals."""
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

keras = tf.keras
L = keras.layers

# (loss, output activation, label kind): every C++ loss, and both crossentropy paths (from the
# softmax/sigmoid layer's logits, and from probabilities).
CASES = [("sparse_categorical_crossentropy", "softmax", "ids"), ("categorical_crossentropy", "softmax", "onehot"),
         ("categorical_crossentropy", "linear-softmax", "onehot"), ("binary_crossentropy", "sigmoid", "binary"),
         ("mean_squared_error", "linear", "real"), ("mean_absolute_error", "tanh", "real")]


def data(kind, rows=40):
    rng = np.random.default_rng(11)
    x = rng.normal(size=(rows, 5)).astype(np.float32)
    ids = rng.integers(0, 3, rows)
    y = {"ids": ids, "onehot": np.eye(3, dtype=np.float32)[ids],
         "binary": rng.integers(0, 2, (rows, 3)).astype(np.float32),
         "real": rng.normal(size=(rows, 3)).astype(np.float32)}[kind]
    w = rng.uniform(0, 2, rows).astype(np.float32)
    return x, y, w, ids


def model(activation, loss, seed=0):
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((5,)), L.Dense(4, activation="tanh")]
    if activation == "linear-softmax":  # a softmax of its own: Keras scores the probabilities
        layers += [L.Dense(3), L.Activation("softmax")]
    else:
        layers.append(L.Dense(3, activation=activation))
    m = keras.Sequential(layers)
    metrics = ["accuracy"] if loss != "mean_absolute_error" else ["mae"]
    m.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, metrics=metrics)
    return m


KERAS_MODEL = """
def model(activation, loss, w0):
    layers = [keras.Input((5,)), keras.layers.Dense(4, activation="tanh")]
    if activation == "linear-softmax":
        layers += [keras.layers.Dense(3), keras.layers.Activation("softmax")]
    else:
        layers.append(keras.layers.Dense(3, activation=activation))
    m = keras.Sequential(layers)
    m.set_weights(w0)
    metrics = ["accuracy"] if loss != "mean_absolute_error" else ["mae"]
    m.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, metrics=metrics)
    return m
"""


@pytest.fixture(scope="module")
def keras_runs(tmp_path_factory):
    """For every case, Keras's evaluate with weights, then fit (sample_weight; class_weight where
    labels are classes), train_on_batch and test_on_batch with weights, from our initial weights."""
    tmp = tmp_path_factory.mktemp("sample_weights")
    for i, (loss, activation, kind) in enumerate(CASES):
        x, y, w, _ = data(kind)
        np.savez(tmp / f"case{i}.npz", x=x, y=y, w=w, *model(activation, loss).get_weights())
    run_keras(KERAS_MODEL + f"""
import numpy as np, keras
for i, (loss, activation, kind) in enumerate({CASES!r}):
    d = np.load(f"case{{i}}.npz")
    x, y, w = d["x"], d["y"], d["w"]
    w0 = [d[f"arr_{{k}}"] for k in range(len(d.files) - 3)]
    out = {{}}
    m = model(activation, loss, w0)
    out["evaluate"] = np.array(m.evaluate(x, y, sample_weight=w, batch_size=8, verbose=0))
    h = m.fit(x, y, sample_weight=w, batch_size=8, epochs=2, shuffle=False, verbose=0)
    out["fit_history"] = np.array([h.history[k] for k in sorted(h.history)])
    out["fit_weights"] = np.concatenate([v.ravel() for v in m.get_weights()])
    out["train_on_batch"] = np.array(m.train_on_batch(x[:8], y[:8], sample_weight=w[:8]))
    out["test_on_batch"] = np.array(m.test_on_batch(x[8:16], y[8:16], sample_weight=w[8:16]))
    if kind in ("ids", "onehot"):
        m = model(activation, loss, w0)
        h = m.fit(x, y, class_weight={{0: 2.0, 2: 0.25}}, batch_size=8, epochs=2, shuffle=False, verbose=0)
        out["class_history"] = np.array([h.history[k] for k in sorted(h.history)])
        out["class_weights"] = np.concatenate([v.ravel() for v in m.get_weights()])
    np.savez(f"keras{{i}}.npz", **out)
""", tmp, timeout=900)
    return tmp


def flat(weights):
    return np.concatenate([w.ravel() for w in weights])


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_weighted_losses_metrics_and_sgd_steps_match_keras(keras_runs, case):
    loss, activation, kind = CASES[case]
    x, y, w, _ = data(kind)
    theirs = np.load(keras_runs / f"keras{case}.npz")
    m = model(activation, loss)
    np.testing.assert_allclose(m.evaluate(x, y, sample_weight=w, batch_size=8, verbose=0), theirs["evaluate"],
                               rtol=1e-5, atol=1e-6)
    h = m.fit(x, y, sample_weight=w, batch_size=8, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(np.array([h.history[k] for k in sorted(h.history)]), theirs["fit_history"], rtol=2e-5,
                               atol=1e-6)
    np.testing.assert_allclose(flat(m.get_weights()), theirs["fit_weights"], rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(m.train_on_batch(x[:8], y[:8], sample_weight=w[:8]), theirs["train_on_batch"],
                               rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(m.test_on_batch(x[8:16], y[8:16], sample_weight=w[8:16]), theirs["test_on_batch"],
                               rtol=2e-5, atol=1e-6)
    if kind in ("ids", "onehot"):
        m = model(activation, loss)
        h = m.fit(x, y, class_weight={0: 2.0, 2: 0.25}, batch_size=8, epochs=2, shuffle=False, verbose=0)
        np.testing.assert_allclose(np.array([h.history[k] for k in sorted(h.history)]), theirs["class_history"],
                                   rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(flat(m.get_weights()), theirs["class_weights"], rtol=2e-5, atol=2e-6)


def test_weighted_loss_is_the_weighted_sum_over_the_sample_count():
    x, y, w, ids = data("ids")
    m = model("softmax", "sparse_categorical_crossentropy")
    p = m.predict(x, verbose=0).astype(np.float64)
    per_sample = -np.log(p[np.arange(len(ids)), ids])
    loss, accuracy = m.evaluate(x, y, sample_weight=w, batch_size=len(x), verbose=0)
    np.testing.assert_allclose(loss, (per_sample * w).sum() / len(x), rtol=1e-6)
    # Keras's compiled metrics are not weighted (weighted_metrics would be).
    assert accuracy == pytest.approx(np.mean(np.argmax(p, axis=1) == ids))


def test_unit_weights_train_bitwise_as_no_weights():
    x, y, _, _ = data("ids")
    plain = model("softmax", "sparse_categorical_crossentropy")
    weighted = model("softmax", "sparse_categorical_crossentropy")
    hp = plain.fit(x, y, batch_size=8, epochs=2, verbose=0)
    hw = weighted.fit(x, y, sample_weight=np.ones(len(x), np.float32), batch_size=8, epochs=2, verbose=0)
    assert hp.history == hw.history
    for a, b in zip(plain.get_weights(), weighted.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_zero_weights_leave_the_weights_unchanged():
    x, y, _, _ = data("real")
    m = model("linear", "mean_squared_error")
    before = m.get_weights()
    m.fit(x, y, sample_weight=np.zeros(len(x), np.float32), batch_size=8, epochs=1, verbose=0)
    for a, b in zip(before, m.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_a_dataset_yielding_weights_trains_as_the_arrays():
    x, y, w, _ = data("ids")
    arrays = model("softmax", "sparse_categorical_crossentropy")
    h_arrays = arrays.fit(x, y, sample_weight=w, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for dataset in (tf.data.Dataset.from_tensor_slices((x, y, w)).batch(8),
                    tf.data.Dataset.from_tensor_slices((x, y, w)).batch(8).map(lambda a, b, c: (a, b, c))):
        m = model("softmax", "sparse_categorical_crossentropy")
        h = m.fit(dataset, epochs=2, verbose=0)
        assert h.history == h_arrays.history
        for a, b in zip(arrays.get_weights(), m.get_weights()):
            np.testing.assert_array_equal(a, b)
        assert m.evaluate(dataset, verbose=0) == m.evaluate(x, y, sample_weight=w, batch_size=8, verbose=0)


def test_validation_data_and_validation_split_carry_their_weights():
    x, y, w, _ = data("ids")
    m = model("softmax", "sparse_categorical_crossentropy")
    h = m.fit(x[:32], y[:32], sample_weight=w[:32], validation_data=(x[32:], y[32:], w[32:]), batch_size=8,
              epochs=1, verbose=0)
    expected = m.evaluate(x[32:], y[32:], sample_weight=w[32:], batch_size=8, verbose=0)
    assert h.history["val_loss"][0] == pytest.approx(expected[0], rel=1e-12)
    split = model("softmax", "sparse_categorical_crossentropy")
    hs = split.fit(x, y, sample_weight=w, validation_split=0.2, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert hs.history["val_loss"][0] == pytest.approx(
        split.evaluate(x[32:], y[32:], sample_weight=w[32:], batch_size=8, verbose=0)[0], rel=1e-12)


def test_mirrored_strategy_trains_weighted_as_one_device(logical_cpus):
    logical_cpus(2)
    x, y, w, _ = data("ids", rows=44)  # 44 rows in batches of 8: an uneven last batch across replicas
    one = model("softmax", "sparse_categorical_crossentropy")
    h_one = one.fit(x, y, sample_weight=w, batch_size=8, epochs=2, verbose=0)
    runs = []
    for _ in range(2):
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            m = model("softmax", "sparse_categorical_crossentropy")
        runs.append((m.fit(x, y, sample_weight=w, batch_size=8, epochs=2, verbose=0).history, m.get_weights()))
    assert runs[0][0] == runs[1][0]  # reproducible bit for bit
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(runs[0][0]["loss"], h_one.history["loss"], rtol=1e-5)
    for a, b in zip(runs[0][1], one.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_central_storage_trains_weighted_as_one_device(logical_cpus):
    logical_cpus(2)
    x, y, w, _ = data("real", rows=44)
    one = model("linear", "mean_squared_error")
    h_one = one.fit(x, y, sample_weight=w, batch_size=8, epochs=2, verbose=0)
    strategy = tf.distribute.experimental.CentralStorageStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        m = model("linear", "mean_squared_error")
    h = m.fit(x, y, sample_weight=w, batch_size=8, epochs=2, verbose=0)
    np.testing.assert_allclose(h.history["loss"], h_one.history["loss"], rtol=1e-5)
    for a, b in zip(m.get_weights(), one.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(shutil.which("mpirun") is None or not tf._core.mpi_available(),
                    reason="needs mpirun and an mdtrain built with MPI")
def test_multi_worker_mirrored_trains_weighted_as_one_device():
    job = os.path.join(os.path.dirname(__file__), "jobs", "weighted_multi_worker_job.py")
    cmd = [sys.executable, "-m", "mdtrain.launch", "-n", "2", "--devices-per-worker", "2", job]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("WEIGHTED_OK") == 2, proc.stdout[-3000:]


def test_bad_weights_are_refused_naming_the_argument():
    x, y, w, _ = data("ids")
    m = model("softmax", "sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match="cannot `class_weight` and `sample_weight` at the same time"):
        m.fit(x, y, sample_weight=w, class_weight={0: 1.0}, verbose=0)
    with pytest.raises(ValueError, match="'sample_weight' sizes: 39"):
        m.fit(x, y, sample_weight=w[:-1], verbose=0)
    with pytest.raises(NotImplementedError, match=r"sample_weight of shape \(40, 2\)"):
        m.fit(x, y, sample_weight=np.ones((40, 2)), verbose=0)
    with pytest.raises(ValueError, match="class_weight keys must be integer class indices"):
        m.fit(x, y, class_weight={"a": 1.0}, verbose=0)
    with pytest.raises(ValueError, match="sample_weight must not be given"):
        m.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), sample_weight=w, verbose=0)
    with pytest.raises(TypeError, match="sample_weight must be an array of numbers"):
        m.evaluate(x, y, sample_weight=object(), verbose=0)


def test_a_pipeline_which_takes_no_weights_refuses_them(logical_cpus):
    logical_cpus(2)
    x, y, w, _ = data("ids")
    distribution = keras.distribution
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few micro-batches: a bubble warning
        strategy = distribution.PipelineParallel(mesh, num_microbatches=2)
    with strategy.scope():
        m = keras.Sequential([keras.Input((5,)), L.Dense(4, activation="tanh"), L.PipelineSplit(), L.Dense(3)])
        m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(ValueError, match="does not take sample weights yet"):
        m.fit(x, y, sample_weight=w, batch_size=8, verbose=0)
    m.fit(x, y, batch_size=8, verbose=0)  # unweighted, it trains
