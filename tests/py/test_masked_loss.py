"""Losses and metrics of an output that carries a mask (Embedding(mask_zero=True) or Masking, then
recurrent layers with return_sequences): as Keras, fit and evaluate leave the masked steps out
(nn/masked_steps.h): per batch, loss = sum over kept steps / kept steps, and the metrics are the
means over the kept steps. Against Keras 3 as the oracle (same weights, same padded data: the
per-epoch losses, the weights after SGD steps, evaluate's loss and metrics), and under the
strategies that read masks against one device."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mdtrain as tf
from mdtrain import _core
from keras_oracle import run_keras

L = tf.keras.layers
HERE = os.path.dirname(os.path.abspath(__file__))

# Padding at the end, at the start, in the middle, a sequence that is all padding, none.
TOKENS = np.array([[3, 1, 4, 0, 0, 0], [0, 0, 5, 2, 6, 1], [1, 0, 2, 0, 3, 0], [0, 0, 0, 0, 0, 0],
                   [6, 5, 4, 3, 2, 1], [2, 2, 0, 0, 0, 0], [0, 4, 4, 4, 0, 0]], np.int32)

KERAS_FIT = """
import json, numpy as np, keras, tensorflow as tf
L = keras.layers
d = np.load("case.npz")
model = keras.Sequential([keras.Input(d["x"].shape[1:], dtype=str(d["x"].dtype))] + {layers})
model.set_weights([d[f"w{{i}}"] for i in range(int(d["nw"]))])
model.compile(optimizer=keras.optimizers.SGD(0.1), loss={loss}, metrics={metrics})
history = model.fit(d["x"], d["y"], batch_size={batch_size}, epochs=3, shuffle=False, verbose=0)
evaluated = model.evaluate(d["x"], d["y"], batch_size={batch_size}, verbose=0, return_dict=True)
np.savez("keras.npz", **{{f"w{{i}}": w for i, w in enumerate(model.get_weights())}})
print("RESULT", json.dumps({{"history": history.history, "evaluate": evaluated}}))
"""

# (layers, loss, metrics, targets(rng, x)): every loss class on masked (batch, steps, features)
# outputs, through the logits of a softmax/sigmoid output and without one.
CASES = {
    "sparse_softmax": ("[L.Embedding(7, 3, mask_zero=True), L.LSTM(4, return_sequences=True), "
                       "L.Dense(3, activation='softmax')]", "'sparse_categorical_crossentropy'", "['accuracy']",
                       lambda rng, x: rng.integers(0, 3, size=x.shape[:2])),
    "sparse_logits_ignore_class": ("[L.Embedding(7, 3, mask_zero=True), L.GRU(4, return_sequences=True), L.Dense(3)]",
                                   "keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=2)",
                                   "['sparse_categorical_accuracy']",
                                   lambda rng, x: rng.integers(0, 3, size=(*x.shape[:2], 1))),
    "categorical": ("[L.Embedding(7, 3, mask_zero=True), L.Bidirectional(L.SimpleRNN(3, return_sequences=True)), "
                    "L.Dense(3, activation='softmax')]", "'categorical_crossentropy'", "['accuracy']",
                    lambda rng, x: np.eye(3, dtype=np.float32)[rng.integers(0, 3, size=x.shape[:2])]),
    "binary": ("[L.Embedding(7, 3, mask_zero=True), L.LSTM(4, return_sequences=True), "
               "L.Dense(1, activation='sigmoid')]", "'binary_crossentropy'", "['accuracy']",
               lambda rng, x: rng.integers(0, 2, size=(*x.shape[:2], 1)).astype(np.float32)),
    "mse_after_masking": ("[L.Masking(0.0), L.GRU(4, return_sequences=True), L.Dropout(0.0), L.Dense(2)]", "'mse'",
                          "['mae']", lambda rng, x: rng.normal(size=(*x.shape[:2], 2)).astype(np.float32)),
}


def _inputs(case):
    if "Masking" in CASES[case][0]:
        x = np.random.default_rng(4).normal(size=(*TOKENS.shape, 3)).astype(np.float32)
        x[TOKENS == 0] = 0.0
        return x
    return TOKENS


def _model(layers_src, x, loss_src, metrics_src, strategy=None):
    scope = strategy.scope() if strategy is not None else _nullcontext()
    with scope:
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input(x.shape[1:], dtype=str(x.dtype))] +
                                    eval(layers_src, {"L": L}))
        rng = np.random.default_rng(3)
        model.set_weights([w + rng.normal(scale=0.3, size=w.shape).astype(np.float32) for w in model.get_weights()])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss=eval(loss_src, {"keras": tf.keras}),
                      metrics=eval(metrics_src))
    return model


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("case", sorted(CASES))
def test_fit_and_evaluate_of_a_masked_output_equal_keras(tmp_path, case):
    layers_src, loss_src, metrics_src, targets = CASES[case]
    x = _inputs(case)
    y = targets(np.random.default_rng(5), x)
    model = _model(layers_src, x, loss_src, metrics_src)
    weights = model.get_weights()
    np.savez(tmp_path / "case.npz", x=x, y=y, nw=np.array(len(weights)), **{f"w{i}": w for i, w in enumerate(weights)})
    # batch_size 2: batches whose kept steps differ (the all-padding row among them), and a last
    # batch of one row.
    out = run_keras(KERAS_FIT.format(layers=layers_src, loss=loss_src, metrics=metrics_src, batch_size=2),
                    cwd=tmp_path)
    keras_result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    history = model.fit(x, y, batch_size=2, epochs=3, shuffle=False, verbose=0)
    evaluated = model.evaluate(x, y, batch_size=2, verbose=0, return_dict=True)
    assert set(history.history) == set(keras_result["history"])
    for key, values in keras_result["history"].items():
        np.testing.assert_allclose(history.history[key], values, rtol=1e-5, atol=1e-7, err_msg=key)
    assert set(evaluated) == set(keras_result["evaluate"])
    for key, value in keras_result["evaluate"].items():
        np.testing.assert_allclose(evaluated[key], value, rtol=1e-5, atol=1e-7, err_msg=key)
    k = np.load(tmp_path / "keras.npz")
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(w, k[f"w{i}"], rtol=1e-5, atol=1e-6, err_msg=str(i))


def _masked_mean_by_hand(model, x, y):
    """The loss of one batch (sparse crossentropy of a softmax) over the kept steps, in numpy."""
    p = model.predict(x, verbose=0).astype(np.float64)
    mask = x != 0
    losses = -np.log(np.take_along_axis(p, y[..., None], axis=-1)[..., 0])
    return (losses * mask).sum() / mask.sum(), ((p.argmax(-1) == y) * mask).sum() / mask.sum()


def test_masked_steps_are_left_out_of_the_loss_and_accuracy():
    model = _model(CASES["sparse_softmax"][0], TOKENS, "'sparse_categorical_crossentropy'", "['accuracy']")
    y = np.random.default_rng(5).integers(0, 3, size=TOKENS.shape)
    loss, accuracy = model.evaluate(TOKENS, y, batch_size=len(TOKENS), verbose=0)
    want_loss, want_accuracy = _masked_mean_by_hand(model, TOKENS, y)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
    np.testing.assert_allclose(accuracy, want_accuracy, rtol=1e-6)
    # Changing the targets of masked steps changes nothing, in evaluate or in training.
    other = y.copy()
    other[TOKENS == 0] = (other[TOKENS == 0] + 1) % 3
    assert model.evaluate(TOKENS, other, batch_size=len(TOKENS), verbose=0) == [loss, accuracy]
    a = _model(CASES["sparse_softmax"][0], TOKENS, "'sparse_categorical_crossentropy'", "['accuracy']")
    b = _model(CASES["sparse_softmax"][0], TOKENS, "'sparse_categorical_crossentropy'", "['accuracy']")
    a.fit(TOKENS, y, batch_size=3, epochs=2, shuffle=False, verbose=0)
    b.fit(TOKENS, other, batch_size=3, epochs=2, shuffle=False, verbose=0)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)


def test_a_batch_whose_every_step_is_masked_has_loss_zero_and_changes_nothing():
    model = _model(CASES["sparse_softmax"][0], TOKENS, "'sparse_categorical_crossentropy'", "['accuracy']")
    before = model.get_weights()
    padding = np.zeros((2, 6), np.int32)
    loss = model.train_on_batch(padding, np.ones((2, 6), np.int64))
    assert (loss[0] if isinstance(loss, list) else loss) == 0.0  # Keras's divide_no_nan
    for w0, w1 in zip(before, model.get_weights()):
        np.testing.assert_array_equal(w0, w1)


def _strategy_case():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 7, size=(21, 6)).astype(np.int32)
    x[::3, 3:] = 0  # rows with different numbers of kept steps: the replicas' counts differ
    x[4] = 0
    return x, rng.integers(0, 3, size=(21, 6))


def _train_under(strategy, x, y):
    layers = ("[L.Embedding(7, 4, mask_zero=True), L.Bidirectional(L.GRU(4, return_sequences=True)), "
              "L.LSTM(5, return_sequences=True), L.Dense(3, activation='softmax')]")
    model = _model(layers, x, "'sparse_categorical_crossentropy'", "['accuracy']", strategy)
    # batch_size 4 over 21 rows: the last batch has one row, so one replica has none.
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    return history.history, model.evaluate(x, y, batch_size=4, verbose=0), model.get_weights()


def test_masked_loss_under_mirrored_and_central_storage_equals_one_device(logical_cpus):
    logical_cpus(3)
    x, y = _strategy_case()
    one_history, one_eval, one = _train_under(tf.distribute.OneDeviceStrategy("/cpu:0"), x, y)
    for strategy in (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]),
                     tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1", "/cpu:2"]),
                     tf.distribute.experimental.CentralStorageStrategy()):
        history, evaluated, weights = _train_under(strategy, x, y)
        for key in one_history:
            np.testing.assert_allclose(history[key], one_history[key], rtol=1e-5, err_msg=f"{strategy} {key}")
        np.testing.assert_allclose(evaluated, one_eval, rtol=1e-5, err_msg=str(strategy))
        for a, b in zip(one, weights):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=str(strategy))


@pytest.mark.skipif(shutil.which("mpirun") is None or not _core.mpi_available(),
                    reason="needs mpirun and an mdtrain built with MPI")
def test_masked_loss_under_multi_worker_mirrored_equals_one_device():
    job = os.path.join(HERE, "jobs", "masked_loss_multi_worker_job.py")
    cmd = [sys.executable, "-m", "mdtrain.launch", "-n", "2", "--devices-per-worker", "2", job]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("MASKED_OK") == 2, proc.stdout[-3000:]


KERAS_FUNCTIONAL_FIT = """
import json, numpy as np, keras, tensorflow as tf
L = keras.layers
d = np.load("case.npz")
{build}
names = json.loads(str(d["names"]))
for name in names:
    layer = model.get_layer(name)
    layer.set_weights([d[f"{{name}}/{{i}}"] for i in range(len(layer.get_weights()))])
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit([d["a"], d["b"]], d["y"], batch_size=3, epochs=2, shuffle=False, verbose=0)
evaluated = model.evaluate([d["a"], d["b"]], d["y"], batch_size=3, verbose=0, return_dict=True)
np.savez("keras.npz", p=model.predict([d["a"], d["b"]], verbose=0),
         **{{f"{{n}}/{{i}}": w for n in names for i, w in enumerate(model.get_layer(n).get_weights())}})
print("RESULT", json.dumps({{"history": history.history, "evaluate": evaluated}}))
"""

# Two inputs with different padding, each masked (Masking) and read by a recurrent layer, then
# merged: Keras 3 ORs the masks of Add (none unless every input has one) and
# of Concatenate on the last axis (an unmasked input counting as all ones), and joins them in time
# for Concatenate(axis=1); the merged mask reaches the next recurrent layer and the loss.
FUNCTIONAL = {
    "add": "L.Add()([ra, rb])",
    "concatenate": "L.Concatenate()([ra, rb])",
    "concatenate_time": "L.Concatenate(axis=1)([ra, rb])",
    "concatenate_one_unmasked": "L.Concatenate()([ra, L.Dense(4, name='du')(b)])",
}
FUNCTIONAL_BUILD = """
a = keras.Input((6, 3))
b = keras.Input((6, 3))
ra = L.LSTM(4, return_sequences=True, name="lstm")(L.Masking(0.0)(a))
rb = L.GRU(4, return_sequences=True, name="gru")(L.Masking(0.0)(b))
merged = {merge}
out = L.Dense(3, activation="softmax", name="out")(L.SimpleRNN(3, return_sequences=True, name="rnn")(merged))
model = keras.Model([a, b], out)
"""


@pytest.mark.parametrize("merge", sorted(FUNCTIONAL))
def test_masks_in_functional_models_equal_keras(tmp_path, merge):
    build = FUNCTIONAL_BUILD.format(merge=FUNCTIONAL[merge])
    rng = np.random.default_rng(4)
    a = rng.normal(size=(*TOKENS.shape, 3)).astype(np.float32)
    a[TOKENS == 0] = 0.0
    b = rng.normal(size=(*TOKENS.shape, 3)).astype(np.float32)
    b[np.roll(TOKENS, 2, axis=1) == 0] = 0.0  # other padding: OR, AND and either input's mask all differ
    b[0] = 1.0
    space = {"keras": tf.keras, "L": L}
    tf.keras.utils.set_random_seed(0)
    exec(build, space)
    model = space["model"]
    rng = np.random.default_rng(3)
    model.set_weights([w + rng.normal(scale=0.3, size=w.shape).astype(np.float32) for w in model.get_weights()])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    layers = {layer.name: layer for layer in model.layers if layer.get_weights()}
    names = sorted(layers)
    steps = 12 if merge == "concatenate_time" else 6
    y = np.random.default_rng(5).integers(0, 3, size=(len(a), steps))
    np.savez(tmp_path / "case.npz", a=a, b=b, y=y, names=np.array(json.dumps(names)),
             **{f"{n}/{i}": w for n in names for i, w in enumerate(layers[n].get_weights())})
    out = run_keras(KERAS_FUNCTIONAL_FIT.format(build=build), cwd=tmp_path)
    keras_result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    history = model.fit([a, b], y, batch_size=3, epochs=2, shuffle=False, verbose=0)
    evaluated = model.evaluate([a, b], y, batch_size=3, verbose=0, return_dict=True)
    k = np.load(tmp_path / "keras.npz")
    np.testing.assert_allclose(model.predict([a, b], verbose=0), k["p"], rtol=1e-5, atol=1e-6)
    for key, values in keras_result["history"].items():
        np.testing.assert_allclose(history.history[key], values, rtol=1e-5, atol=1e-7, err_msg=key)
    for key, value in keras_result["evaluate"].items():
        np.testing.assert_allclose(evaluated[key], value, rtol=1e-5, atol=1e-7, err_msg=key)
    for n in names:
        for i, w in enumerate(layers[n].get_weights()):
            np.testing.assert_allclose(w, k[f"{n}/{i}"], rtol=1e-5, atol=1e-6, err_msg=f"{n}/{i}")


def test_what_masked_outputs_cannot_do_yet_is_refused_by_name(logical_cpus):
    logical_cpus(2)
    # Several outputs travel packed (nn/multi_output_loss.h), without their masks.
    inputs = tf.keras.Input((6,), dtype="int32")
    hidden = L.Embedding(7, 3, mask_zero=True, name="emb")(inputs)
    functional = tf.keras.Model(inputs, [L.Dense(2)(hidden), L.Dense(1)(hidden)])
    functional.compile(optimizer="sgd", loss="mse")
    with pytest.raises(NotImplementedError, match=r"functional model.*emb.*one output"):
        functional.fit(TOKENS, [np.zeros((7, 6, 2), np.float32), np.zeros((7, 6, 1), np.float32)], verbose=0)
    # Keras's Multiply reads masks (masked steps multiply as 1); mdtrain's does not yet.
    a, b = tf.keras.Input((6, 3)), tf.keras.Input((6, 3))
    with pytest.raises(NotImplementedError, match=r'Multiply layer "times".*mask'):
        L.Multiply(name="times")([L.Masking(0.0)(a), L.Masking(0.0)(b)])
    # Strategies whose executors do not leave masked steps out of the loss refuse at compile.
    mesh = tf.keras.distribution.DeviceMesh((2,), ("batch",), devices=tf.keras.distribution.list_devices()[:2])
    with tf.keras.distribution.ModelParallel(layout_map=tf.keras.distribution.LayoutMap(mesh)).scope():
        seq = tf.keras.Sequential([tf.keras.Input((6,), dtype="int32"), L.Embedding(7, 3, mask_zero=True, name="emb"),
                                   L.Dense(2)])
        with pytest.raises(NotImplementedError, match=r"carries the mask of layer \"emb\""):
            seq.compile(optimizer="sgd", loss="mse")


KERAS_TAPE = """
import json, numpy as np, keras, tensorflow as tf
L = keras.layers
d = np.load("case.npz")
model = {model}
model.set_weights([d[f"w{{i}}"] for i in range(int(d["nw"]))])
loss_fn = {loss}
with tf.GradientTape() as tape:
    loss = loss_fn(d["y"], model(d["x"]))
grads = tape.gradient(loss, model.trainable_weights)
np.savez("keras.npz", **{{f"g{{i}}": tf.convert_to_tensor(g).numpy() for i, g in enumerate(grads)}})
print("RESULT", json.dumps({{"loss": float(loss)}}))
"""

TAPE_MODELS = {
    "sequential": "keras.Sequential([keras.Input((6,), dtype='int32'), L.Embedding(7, 3, mask_zero=True), "
                  "L.LSTM(4, return_sequences=True), L.Dense(3)])",
    "functional": "(lambda i: keras.Model(i, L.Dense(3)(L.GRU(4, return_sequences=True)("
                  "L.Embedding(7, 3, mask_zero=True)(i)))))(keras.Input((6,), dtype='int32'))",
}


@pytest.mark.parametrize("kind", sorted(TAPE_MODELS))
@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum"])
def test_a_loss_called_on_a_masked_model_output_under_gradient_tape_equals_keras(tmp_path, kind, reduction):
    # model(x) carries its output's mask (Keras's _keras_mask) and the loss reads it: the same
    # value and gradients as Keras, not the padding's loss.
    keras_model = TAPE_MODELS[kind].replace("keras.", "tf.keras.")
    model = eval(keras_model, {"tf": tf, "L": L})
    rng = np.random.default_rng(3)
    model.set_weights([w + rng.normal(scale=0.3, size=w.shape).astype(np.float32) for w in model.get_weights()])
    weights = model.get_weights()
    y = np.random.default_rng(5).integers(0, 3, size=TOKENS.shape)
    np.savez(tmp_path / "case.npz", x=TOKENS, y=y, nw=np.array(len(weights)),
             **{f"w{i}": w for i, w in enumerate(weights)})
    loss_src = f"keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction={reduction!r})"
    out = run_keras(KERAS_TAPE.format(model=TAPE_MODELS[kind], loss=loss_src), cwd=tmp_path)
    expected = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])["loss"]
    loss_fn = eval(loss_src, {"keras": tf.keras})
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(TOKENS))
    grads = tape.gradient(loss, model.trainable_weights)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    k = np.load(tmp_path / "keras.npz")
    for i, g in enumerate(grads):
        np.testing.assert_allclose(np.asarray(g), k[f"g{i}"], rtol=1e-4, atol=1e-6, err_msg=str(i))


def test_a_metric_called_on_a_masked_output_directly_refuses_rather_than_count_the_padding():
    model = tf.keras.Sequential([tf.keras.Input((6,), dtype="int32"), L.Embedding(7, 3, mask_zero=True),
                                 L.LSTM(4, return_sequences=True), L.Dense(3)])
    metric = tf.keras.metrics.SparseCategoricalAccuracy()
    with pytest.raises(NotImplementedError, match=r"SparseCategoricalAccuracy.*carries a mask"):
        metric.update_state(np.zeros(TOKENS.shape, np.int32), model(TOKENS))
    metric.update_state(np.zeros((2,), np.int32), np.eye(3, dtype=np.float32)[:2])  # an unmasked one still counts
    assert float(metric.result()) == 0.5


def test_a_functional_model_called_directly_refuses_masked_merges():
    a = tf.keras.Input((6,), dtype="int32")
    e = L.Embedding(7, 3, mask_zero=True)(a)
    model = tf.keras.Model(a, L.Dense(2)(L.Add(name="sum")([e, e])))
    with pytest.raises(NotImplementedError, match=r'Add layer "sum" merges masked inputs'):
        model(TOKENS)
    assert model.predict(TOKENS, verbose=0).shape == (7, 6, 2)
