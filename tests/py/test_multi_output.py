"""Training models with several outputs (issue #18): a loss per output (list, dict, or one for
all), loss_weights, per-output metrics and logs named as Keras 3 names them, labels as a list or
dict, checked against Keras 3 as the oracle; a subclassed model with two outputs; Mirrored on two
logical devices equal to one device."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mdtrain as tf

keras = tf.keras
layers = keras.layers

N, T = 64, 4


def data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, T, 6)).astype(np.float32)
    y_cls = rng.integers(0, 3, size=(N, T))  # a sequence output: one class id per time step
    y_reg = rng.normal(size=(N, 2)).astype(np.float32)
    return x, y_cls, y_reg


def two_heads(seed=3):
    """A classification head over every time step (batch, T, 3) and a regression head (batch, 2)."""
    tf.keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(T, 6), name="features")
    trunk = layers.Dense(8, activation="relu", name="trunk")(inputs)
    cls = layers.Dense(3, activation="softmax", name="cls")(trunk)
    reg = layers.Dense(2, name="reg")(layers.Flatten(name="flat")(trunk))
    return keras.Model(inputs, [cls, reg], name="two_heads")


KERAS_MODEL = """
import json, keras, numpy as np
L = keras.layers
inputs = keras.Input((4, 6), name="features")
trunk = L.Dense(8, activation="relu", name="trunk")(inputs)
cls = L.Dense(3, activation="softmax", name="cls")(trunk)
reg = L.Dense(2, name="reg")(L.Flatten(name="flat")(trunk))
model = keras.Model(inputs, [cls, reg])
w = np.load("weights.npz")
for name in ("trunk", "cls", "reg"):
    model.get_layer(name).set_weights([w[name + "_kernel"], w[name + "_bias"]])
x, y_cls, y_reg = np.load("x.npy"), np.load("y_cls.npy"), np.load("y_reg.npy")
"""


def save_inputs(tmp_path, model, x, y_cls, y_reg):
    weights = {}
    for name in ("trunk", "cls", "reg"):
        kernel, bias = next(l for l in model.layers if l.name == name).get_weights()
        weights[name + "_kernel"], weights[name + "_bias"] = kernel, bias
    np.savez(tmp_path / "weights.npz", **weights)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y_cls.npy", y_cls)
    np.save(tmp_path / "y_reg.npy", y_reg)


def keras_run(tmp_path, compile_args, y_expr):
    """Keras 3 from the same weights: fit 2 epochs (no shuffling), evaluate, final weights."""
    from keras_oracle import run_keras

    run_keras(KERAS_MODEL + f"""
model.compile(optimizer=keras.optimizers.SGD(0.1), {compile_args})
y = {y_expr}
history = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history
evaluated = model.evaluate(x, y, batch_size=16, verbose=0)
np.savez("keras_weights.npz", *[model.get_layer(n).get_weights()[i] for n in ("trunk", "cls", "reg")
                                  for i in (0, 1)])
json.dump({{"history": history, "evaluate": [float(v) for v in evaluated]}}, open("keras.json", "w"))
""", cwd=tmp_path)
    with np.load(tmp_path / "keras_weights.npz") as f:
        weights = [f[f"arr_{i}"] for i in range(len(f.files))]
    return json.load(open(tmp_path / "keras.json")), weights


def mdtrain_weights(model):
    return [w for name in ("trunk", "cls", "reg") for w in next(l for l in model.layers if l.name == name).get_weights()]


def assert_matches_keras(model, history, evaluated, oracle, keras_weights):
    assert set(history.history) == set(oracle["history"])
    for key, values in oracle["history"].items():
        np.testing.assert_allclose(history.history[key], values, rtol=2e-5, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(evaluated, oracle["evaluate"], rtol=2e-5, atol=1e-6)
    for a, b in zip(mdtrain_weights(model), keras_weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_list_losses_weights_and_metrics_match_keras(tmp_path):
    x, y_cls, y_reg = data()
    model = two_heads()
    save_inputs(tmp_path, model, x, y_cls, y_reg)
    model.compile(keras.optimizers.SGD(0.1), loss=["sparse_categorical_crossentropy", "mse"], loss_weights=[1.0, 0.5],
                  metrics=[["accuracy"], ["mae", "mse"]])
    assert model.metrics_names == ["loss", "cls_loss", "reg_loss", "cls_accuracy", "reg_mae", "reg_mse"]
    history = model.fit(x, [y_cls, y_reg], batch_size=16, epochs=2, shuffle=False, verbose=0)
    evaluated = model.evaluate(x, [y_cls, y_reg], batch_size=16, verbose=0)
    oracle, keras_weights = keras_run(
        tmp_path, 'loss=["sparse_categorical_crossentropy", "mse"], loss_weights=[1.0, 0.5], '
                  'metrics=[["accuracy"], ["mae", "mse"]]', "[y_cls, y_reg]")
    assert_matches_keras(model, history, evaluated, oracle, keras_weights)
    # The total is the weighted sum of the per-output means.
    loss, cls_loss, reg_loss = evaluated[:3]
    assert loss == pytest.approx(cls_loss + 0.5 * reg_loss, rel=1e-6)
    # evaluate's dict and the dict form of y give the same numbers, keyed by log name.
    logs = model.evaluate(x, {"reg": y_reg, "cls": y_cls}, batch_size=16, verbose=0, return_dict=True)
    assert list(logs) == model.metrics_names
    np.testing.assert_allclose(list(logs.values()), evaluated, rtol=1e-12)


def test_dict_losses_weights_metrics_and_labels_match_keras(tmp_path):
    x, y_cls, y_reg = data(1)
    model = two_heads(seed=4)
    save_inputs(tmp_path, model, x, y_cls, y_reg)
    compile_args = dict(loss={"reg": "mae", "cls": keras.losses.SparseCategoricalCrossentropy()},
                        loss_weights={"cls": 0.3, "reg": 2.0}, metrics={"cls": ["sparse_categorical_accuracy"]})
    model.compile(keras.optimizers.SGD(0.1), **compile_args)
    y = {"cls": y_cls, "reg": y_reg}
    history = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    evaluated = model.evaluate(x, y, batch_size=16, verbose=0)
    oracle, keras_weights = keras_run(
        tmp_path, 'loss={"reg": "mae", "cls": keras.losses.SparseCategoricalCrossentropy()}, '
                  'loss_weights={"cls": 0.3, "reg": 2.0}, metrics={"cls": ["sparse_categorical_accuracy"]}',
        '{"cls": y_cls, "reg": y_reg}')
    assert_matches_keras(model, history, evaluated, oracle, keras_weights)


def test_one_loss_for_every_output_and_batch_methods_match_keras(tmp_path):
    x, y_cls, y_reg = data(2)
    y_onehot = np.eye(3, dtype=np.float32)[y_cls]
    model = two_heads(seed=5)
    save_inputs(tmp_path, model, x, y_onehot, y_reg)
    model.compile(keras.optimizers.SGD(0.1), loss="mse", metrics=["mae", "mse"])  # one metric per output
    assert model.metrics_names == ["loss", "cls_loss", "reg_loss", "cls_mae", "reg_mse"]
    history = model.fit(x, [y_onehot, y_reg], batch_size=16, epochs=2, shuffle=False, verbose=0)
    evaluated = model.evaluate(x, [y_onehot, y_reg], batch_size=16, verbose=0)
    oracle, keras_weights = keras_run(tmp_path, 'loss="mse", metrics=["mae", "mse"]', "[y_cls, y_reg]")
    assert_matches_keras(model, history, evaluated, oracle, keras_weights)
    # train_on_batch / test_on_batch return Keras's order: loss, per-output losses, metrics.
    before = model.test_on_batch(x, [y_onehot, y_reg])
    assert len(before) == 5 and before[0] == pytest.approx(before[1] + before[2], rel=1e-6)
    logs = model.train_on_batch(x, [y_onehot, y_reg], return_dict=True)
    assert list(logs) == model.metrics_names
    assert logs["loss"] == pytest.approx(before[0], rel=1e-6)  # the loss before the update


def test_bad_labels_and_compile_arguments_raise_value_error():
    x, y_cls, y_reg = data()
    model = two_heads()
    with pytest.raises(ValueError, match="list of 2"):
        model.compile("sgd", loss=["mse"])
    with pytest.raises(ValueError, match=r"\['head'\].*not outputs"):
        model.compile("sgd", loss={"head": "mse"})
    with pytest.raises(ValueError, match=r"no loss for outputs \['reg'\]"):
        model.compile("sgd", loss={"cls": "sparse_categorical_crossentropy"})
    with pytest.raises(ValueError, match="ignore_class"):
        model.compile("sgd", loss=[keras.losses.SparseCategoricalCrossentropy(ignore_class=0), "mse"])
    with pytest.raises(ValueError, match="one entry per output"):
        model.compile("sgd", loss="mse", metrics=["mae"])
    model.compile("sgd", loss=["sparse_categorical_crossentropy", "mse"])
    with pytest.raises(ValueError, match=r"2 outputs \['cls', 'reg'\].*a list of 1"):
        model.fit(x, [y_cls], verbose=0)
    with pytest.raises(ValueError, match="2 outputs"):
        model.fit(x, y_cls, verbose=0)
    with pytest.raises(ValueError, match=r"missing \['reg'\]; unknown outputs \['regression'\]"):
        model.fit(x, {"cls": y_cls, "regression": y_reg}, verbose=0)
    with pytest.raises(ValueError, match=r"output 'reg' has shape \(None, 2\).*\(None, 2\).*got \(64, 1\)"):
        model.fit(x, [y_cls, y_reg[:, :1]], verbose=0)
    with pytest.raises(ValueError, match=r"output 'cls'.*one class id per sample.*got \(64, 4, 3\)"):
        model.fit(x, [np.eye(3)[y_cls], y_reg], verbose=0)
    with pytest.raises(ValueError, match=r"same number of samples.*'reg': \(32, 2\)"):
        model.fit(x, [y_cls, y_reg[:32]], verbose=0)
    with pytest.raises(ValueError, match=r"output 'cls'.*label 3 .*out of range for 3 classes"):
        model.evaluate(x, [np.full_like(y_cls, 3), y_reg], verbose=0)


class TwoHeads(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.trunk = layers.Dense(8, activation="relu", name="trunk")
        self.cls = layers.Dense(3, activation="softmax", name="cls")
        self.reg = layers.Dense(1, name="reg")

    def call(self, inputs, training=None):
        h = self.trunk(inputs)
        return [self.cls(h), self.reg(h)]


def test_subclassed_model_with_two_outputs_trains_like_its_functional_twin():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(90, 5)).astype(np.float32)
    y_cls, y_reg = rng.integers(0, 3, size=90), rng.normal(size=(90,)).astype(np.float32)  # (batch,) for (batch, 1)
    tf.keras.utils.set_random_seed(7)
    sub = TwoHeads()
    sub.compile(keras.optimizers.Adam(0.01), loss=["sparse_categorical_crossentropy", "mse"], loss_weights=[1, 0.2],
                metrics=[["accuracy"], []])  # compiled before call() is traced, as Keras allows
    sub.build((None, 5))
    untraced = TwoHeads()  # fit traces call() and applies the pending compile
    untraced.compile("adam", loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"})
    assert list(untraced.fit(x, [y_cls, y_reg], verbose=0).history) == ["loss", "cls_loss", "reg_loss"]
    inputs = keras.Input((5,))
    h = layers.Dense(8, activation="relu", name="trunk2")(inputs)
    twin = keras.Model(inputs, [layers.Dense(3, activation="softmax", name="cls2")(h), layers.Dense(1, name="reg2")(h)])
    twin.set_weights(sub.get_weights())
    twin.compile(keras.optimizers.Adam(0.01), loss=["sparse_categorical_crossentropy", "mse"], loss_weights=[1, 0.2],
                 metrics=[["accuracy"], []])
    hs = sub.fit(x, [y_cls, y_reg], batch_size=32, epochs=3, verbose=0, shuffle=False)
    ht = twin.fit(x, [y_cls, y_reg], batch_size=32, epochs=3, verbose=0, shuffle=False)
    assert list(hs.history) == ["loss", "cls_loss", "reg_loss", "cls_accuracy"]
    assert hs.history["loss"] == ht.history["loss"]
    assert hs.history["cls_accuracy"] == ht.history["cls2_accuracy"]
    for a, b in zip(sub.get_weights(), twin.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert hs.history["loss"][-1] < hs.history["loss"][0]


def test_mirrored_on_two_devices_equals_one_device(logical_cpus):
    x, y_cls, y_reg = data(3)
    logical_cpus(2)
    runs = []
    for strategy in (tf.distribute.OneDeviceStrategy("/cpu:0"), tf.distribute.MirroredStrategy()):
        with strategy.scope():
            model = two_heads(seed=9)
            model.compile(keras.optimizers.Adam(0.01), loss=["sparse_categorical_crossentropy", "mse"],
                          loss_weights=[0.7, 1.5], metrics=[["accuracy"], ["mae"]])
        # 64 rows in batches of 24: an uneven last batch of 16 (8 rows per replica).
        history = model.fit(x, [y_cls, y_reg], batch_size=24, epochs=3, verbose=0)
        runs.append((model, history.history, model.evaluate(x, [y_cls, y_reg], batch_size=10, verbose=0)))
    (one, one_history, one_eval), (mirrored, mirrored_history, mirrored_eval) = runs
    assert mirrored.distribute_strategy.num_replicas_in_sync == 2
    assert list(one_history) == list(mirrored_history)
    for key in one_history:
        np.testing.assert_allclose(mirrored_history[key], one_history[key], rtol=1e-5, atol=1e-7, err_msg=key)
    np.testing.assert_allclose(mirrored_eval, one_eval, rtol=1e-5, atol=1e-7)
    for a, b in zip(one.get_weights(), mirrored.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_save_and_load_keep_the_losses_weights_and_metrics(tmp_path):
    x, y_cls, y_reg = data(4)
    model = two_heads(seed=11)
    model.compile("adam", loss={"cls": "sparse_categorical_crossentropy", "reg": "mae"}, loss_weights=[2.0, 1.0],
                  metrics={"reg": ["mse"], "cls": ["acc"]})
    history = model.fit(x, [y_cls, y_reg], batch_size=16, epochs=1, verbose=0,
                        validation_data=(x[:20], {"cls": y_cls[:20], "reg": y_reg[:20]}))
    assert list(history.history) == model.metrics_names + ["val_" + k for k in model.metrics_names]
    expected = model.evaluate(x, [y_cls, y_reg], verbose=0)
    model.save(tmp_path / "m.mdtrain")
    loaded = keras.models.load_model(tmp_path / "m.mdtrain")
    assert loaded.metrics_names == ["loss", "cls_loss", "reg_loss", "cls_acc", "reg_mse"]
    assert loaded.loss.loss_weights == [2.0, 1.0]
    np.testing.assert_allclose(loaded.evaluate(x, {"cls": y_cls, "reg": y_reg}, verbose=0), expected, rtol=1e-6)
    loaded.fit(x, [y_cls, y_reg], batch_size=16, epochs=1, verbose=0)  # the optimizer state came along


def test_keras_archive_keeps_the_losses_both_ways(tmp_path):
    """A .keras file of a compiled two-output model: Keras 3 loads it compiled with the same losses,
    weights and metrics (its evaluate agrees), and mdtrain reads it back compiled."""
    from keras_oracle import run_keras

    x, y_cls, y_reg = data(5)
    model = two_heads(seed=12)
    model.compile("adam", loss=["sparse_categorical_crossentropy", "mae"], loss_weights=[0.5, 2.0],
                  metrics=[["accuracy"], ["mse"]])
    expected = model.evaluate(x, [y_cls, y_reg], batch_size=16, verbose=0)
    model.save(tmp_path / "m.keras")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y_cls.npy", y_cls)
    np.save(tmp_path / "y_reg.npy", y_reg)
    np.save(tmp_path / "expected.npy", np.array(expected))
    run_keras("""
        import keras, numpy as np
        model = keras.models.load_model("m.keras")
        got = model.evaluate(np.load("x.npy"), [np.load("y_cls.npy"), np.load("y_reg.npy")], batch_size=16, verbose=0)
        np.testing.assert_allclose(got, np.load("expected.npy"), rtol=1e-5, atol=1e-6)
    """, cwd=tmp_path)
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert loaded.metrics_names == model.metrics_names
    np.testing.assert_allclose(loaded.evaluate(x, [y_cls, y_reg], batch_size=16, verbose=0), expected, rtol=1e-6)


MULTI_OUTPUT_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "multi_output_job.py")


def run_job(tmp_path, strategy, launch=False):
    out = tmp_path / f"{strategy}.npz"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    prefix = [sys.executable, "-m", "mdtrain.launch", "-n", "2"] if launch else [sys.executable]
    proc = subprocess.run([*prefix, MULTI_OUTPUT_JOB, "--strategy", strategy, "--out", str(out)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with np.load(out) as f:
        return [f[f"arr_{i}"] for i in range(len(f.files))]


def test_central_storage_and_multi_worker_equal_one_device(tmp_path):
    """Every data-parallel strategy trains the two-output model to the weights, logs and evaluate of
    one device (to float32 rounding): each output keeps its own divisor however the batch is cut."""
    one = run_job(tmp_path, "one")
    strategies = ["mirrored", "central"]
    if shutil.which("mpirun") is not None and tf._core.mpi_available():
        strategies.append("mwms")
    for strategy in strategies:
        got = run_job(tmp_path, strategy, launch=strategy == "mwms")
        assert len(got) == len(one)
        for a, b in zip(one, got):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=strategy)
