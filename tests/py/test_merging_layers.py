"""The merge layers Subtract, Average, Maximum, Minimum and Dot, Keras's broadcasting of merges of
different shapes (Add and Multiply too), and the functional forms keras.layers.add / subtract /
... / dot, against Keras 3 on TF (skipped without it): Keras loads mdtrain's .keras file of each
model, and its merge outputs, predictions, losses and weights after 3 SGD epochs (a Dense before
each input, so the gradient flows through the merge's backward) match ours; Keras's own .keras
file loads here; the eager call and its gradient (ties and NaN as TF's tf.maximum) as Keras's;
MirroredStrategy on 2 devices trains as one; ONNX files compute what predict does; configs, masks
and bad arguments as Keras's."""
import importlib.util

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

keras = tf.keras
L = keras.layers

# name: (input shapes without the batch, the merge called on the inputs' Dense outputs as Keras
# writes it (evaluated by both sides), its config as Keras writes it besides name/trainable/dtype)
CASES = {
    "subtract": ([(4,), (4,)], "L.Subtract()(h)", {}),
    "subtract_fn_broadcast": ([(3, 4), (1, 4)], "L.subtract(h)", {}),
    "average3": ([(4,), (4,), (4,)], "L.Average()(h)", {}),
    "average_ranks": ([(3, 4), (4,)], "L.average(h)", {}),
    "maximum3": ([(5,), (5,), (5,)], "L.Maximum()(h)", {}),
    "maximum_broadcast": ([(2, 3, 4), (3, 1)], "L.maximum(h)", {}),
    "minimum": ([(2, 3), (2, 3)], "L.minimum(h)", {}),
    "add_broadcast": ([(3, 4), (3, 1)], "L.add(h)", {}),
    "multiply_broadcast": ([(2, 3), (1, 3), (3,)], "L.multiply(h)", {}),
    "concatenate_fn": ([(3, 2), (3, 4)], "L.concatenate(h, axis=-1)", {"axis": -1}),
    "dot_vectors": ([(4,), (4,)], "L.Dot(axes=1)(h)", {"axes": 1, "normalize": False}),
    "dot_pair": ([(3, 5), (4, 3)], "L.Dot(axes=(1, 2))(h)", {"axes": [1, 2], "normalize": False}),
    "dot_negative": ([(2, 3, 4), (4, 5)], "L.dot(h, axes=(-1, 1))", {"axes": [-1, 1], "normalize": False}),
    "dot_normalized": ([(3, 5), (3, 5)], "L.Dot(axes=-1, normalize=True)(h)", {"axes": -1, "normalize": True}),
    "dot_fn_normalized_pair": ([(4, 3), (4,)], "L.dot(h, axes=(1, 1), normalize=True)",
                               {"axes": [1, 1], "normalize": True}),
}


def data(shapes, rows=16, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.uniform(-1, 1, (rows, *s)).astype(np.float32) for s in shapes]
    return xs, rng.uniform(-1, 1, (rows, 3)).astype(np.float32)


def model_of(name, seed=0):
    """Inputs -> Dense (keeping each input's shape) -> the merge -> Flatten -> Dense(3), SGD on mse."""
    shapes, merge, _ = CASES[name]
    tf.keras.utils.set_random_seed(seed)
    inputs = [keras.Input(s) for s in shapes]
    h = [L.Dense(s[-1], name=f"before{k}")(x) for k, (x, s) in enumerate(zip(inputs, shapes))]
    merged = eval(merge, {"L": L}, {"h": h})  # noqa: S307 (the cases above)
    out = L.Dense(3, name="after")(L.Flatten()(merged))
    model = keras.Model(inputs, out)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def merge_layer(model):
    return next(layer for layer in model.layers if not layer.name.startswith(("before", "after", "flatten"))
                and type(layer).__name__ not in ("InputLayer", "Flatten"))


@pytest.fixture(scope="module")
def keras_runs(tmp_path_factory):
    """For every case, from mdtrain's .keras file of its model (initial weights): Keras's merge
    output on the Dense outputs, predictions, weights after 3 SGD epochs and losses, its config; and
    Keras's own .keras file."""
    tmp = tmp_path_factory.mktemp("merging")
    for name, (shapes, _, _) in CASES.items():
        xs, y = data(shapes)
        np.savez(tmp / f"data_{name}.npz", *xs, y=y)
        model_of(name).save(tmp / f"ours_{name}.keras")
    run_keras(f"""
        import numpy as np, keras
        for name in {sorted(CASES)!r}:
            d = np.load(f"data_{{name}}.npz")
            xs = [d[f"arr_{{k}}"] for k in range(len(d.files) - 1)]
            m = keras.models.load_model(f"ours_{{name}}.keras", compile=False)
            merge = [l for l in m.layers if type(l).__module__.startswith("keras.src.layers.merging")][0]
            hidden = [np.asarray(m.get_layer(f"before{{k}}")(x)) for k, x in enumerate(xs)]
            inner = np.asarray(merge(hidden))
            out = m.predict(xs, verbose=0)
            config = {{k: v for k, v in merge.get_config().items() if k not in ("name", "trainable", "dtype")}}
            m.save(f"keras_{{name}}.keras")
            m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
            h = m.fit(xs, d["y"], batch_size=4, epochs=3, shuffle=False, verbose=0)
            np.savez(f"keras_{{name}}.npz", inner, out, np.array(h.history["loss"]), *m.get_weights())
            with open(f"config_{{name}}.txt", "w") as f:
                f.write(repr((type(merge).__name__, config)))
    """, tmp, timeout=900)
    return tmp


def _normalized(value):
    return [_normalized(v) for v in value] if isinstance(value, (list, tuple)) else value


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_and_sgd_steps_match_keras_from_our_keras_file(keras_runs, name):
    shapes, _, config = CASES[name]
    xs, y = data(shapes)
    model = model_of(name)
    theirs = np.load(keras_runs / f"keras_{name}.npz")
    np.testing.assert_allclose(model.predict(xs, verbose=0), theirs["arr_1"], rtol=1e-5, atol=1e-6)
    cls, keras_config = eval(open(keras_runs / f"config_{name}.txt").read())  # noqa: S307 (our own file)
    assert cls == type(merge_layer(model)).__name__
    assert {k: _normalized(v) for k, v in keras_config.items()} == config
    history = model.fit(xs, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    np.testing.assert_allclose(history.history["loss"], theirs["arr_2"], rtol=1e-5)
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(w, theirs[f"arr_{i + 3}"], rtol=1e-5, atol=1e-6, err_msg=f"weight {i}")
    # every input's Dense trained: the gradient reached each input through the merge
    start = model_of(name)
    for k in range(len(shapes)):
        assert not np.allclose(model.get_layer(f"before{k}").get_weights()[0],
                               start.get_layer(f"before{k}").get_weights()[0]), k


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_merge_alone_computes_what_keras_does_in_a_model_and_eagerly(keras_runs, name):
    shapes, _, _ = CASES[name]
    xs, _ = data(shapes)
    model = model_of(name)
    hidden = [model.get_layer(f"before{k}")(x).numpy() for k, x in enumerate(xs)]
    theirs = np.load(keras_runs / f"keras_{name}.npz")["arr_0"]
    inputs = [keras.Input(h.shape[1:]) for h in hidden]
    alone = keras.Model(inputs, type(merge_layer(model)).from_config(merge_layer(model).get_config())(inputs))
    np.testing.assert_allclose(alone.predict(hidden, verbose=0), theirs, rtol=1e-6, atol=1e-6)
    eager = type(merge_layer(model)).from_config(merge_layer(model).get_config())(hidden)
    np.testing.assert_allclose(np.asarray(eager), theirs, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_kerass_keras_file_loads_and_predicts_the_same(keras_runs, name):
    shapes, _, config = CASES[name]
    xs, _ = data(shapes)
    loaded = keras.models.load_model(keras_runs / f"keras_{name}.keras")
    layer = merge_layer(loaded)
    assert type(layer).__name__ == type(merge_layer(model_of(name))).__name__
    assert {k: _normalized(v) for k, v in layer.get_config().items() if k not in ("name", "trainable", "dtype")} == \
        config
    np.testing.assert_allclose(loaded.predict(xs, verbose=0), model_of(name).predict(xs, verbose=0), rtol=1e-6,
                               atol=1e-6)


def test_keras_archive_round_trip_keeps_every_merge(tmp_path):
    for name, (shapes, _, _) in CASES.items():
        xs, y = data(shapes)
        model = model_of(name)
        model.fit(xs, y, batch_size=4, epochs=1, verbose=0)
        model.save(tmp_path / f"{name}.keras")
        loaded = keras.models.load_model(tmp_path / f"{name}.keras")
        assert merge_layer(loaded).get_config() == merge_layer(model).get_config(), name
        np.testing.assert_array_equal(loaded.predict(xs, verbose=0), model.predict(xs, verbose=0), err_msg=name)


def test_two_replicas_train_as_one(logical_cpus):
    logical_cpus(2)
    for name, (shapes, _, _) in CASES.items():
        xs, y = data(shapes)
        one = model_of(name)
        one.fit(xs, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
            two = model_of(name)
        two.fit(xs, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        for a, b in zip(one.get_weights(), two.get_weights()):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")
def test_onnx_files_compute_what_predict_does(tmp_path):
    import onnxruntime
    for name, (shapes, _, _) in CASES.items():
        xs, _ = data(shapes, rows=5)
        model = model_of(name)
        path = tmp_path / f"{name}.onnx"
        model.export(str(path), format="onnx", verbose=False)
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = session.run(None, {i.name: x for i, x in zip(session.get_inputs(), xs)})[0]
        np.testing.assert_allclose(got, model.predict(xs, verbose=0), rtol=1e-5, atol=1e-6, err_msg=name)


# Ties and NaN: TF's tf.maximum/minimum propagate NaN, and their gradient goes to the first input
# where it is >= (<=) the second, so to the second where either is NaN; folded over three inputs.
_SPECIAL = [np.array([[1.0, 2.0, np.nan, 3.0, 0.5, np.nan]], np.float32),
            np.array([[1.0, np.nan, 2.0, 3.0, 0.5, 1.0]], np.float32),
            np.array([[0.0, 1.0, 2.0, 3.0, 0.5, np.nan]], np.float32)]


def test_ties_and_nan_values_and_gradients_are_tfs(tmp_path):
    np.savez(tmp_path / "special.npz", *_SPECIAL)
    run_keras("""
        import numpy as np, keras, tensorflow as tf
        d = np.load("special.npz")
        xs = [tf.constant(d[f"arr_{k}"]) for k in range(3)]
        out = {}
        for name in ("Maximum", "Minimum"):
            with tf.GradientTape() as tape:
                tape.watch(xs)
                y = getattr(keras.layers, name)()(xs)
            out[name] = np.asarray(y)
            for k, g in enumerate(tape.gradient(y, xs, output_gradients=tf.constant([[1., 2., 3., 4., 5., 6.]]))):
                out[f"{name}_grad{k}"] = np.asarray(g)
        np.savez("keras_special.npz", **out)
    """, tmp_path)
    theirs = np.load(tmp_path / "keras_special.npz")
    for name in ("Maximum", "Minimum"):
        xs = [tf.Variable(x) for x in _SPECIAL]
        with tf.GradientTape() as tape:
            y = getattr(L, name)()(xs)
        np.testing.assert_array_equal(np.asarray(y), theirs[name])
        grads = tape.gradient(y, xs, output_gradients=tf.constant([[1., 2., 3., 4., 5., 6.]]))
        for k, g in enumerate(grads):
            np.testing.assert_array_equal(np.asarray(g), theirs[f"{name}_grad{k}"], err_msg=f"{name} {k}")


def test_masks_pass_through_subtract_and_average_and_end_at_dot():
    from mdtrain.keras import _keras_tensor
    tokens = keras.Input((5,))
    emb = L.Embedding(7, 3, mask_zero=True)(tokens)
    a, b = L.Dense(3)(emb), L.Dense(3)(emb)
    assert L.Subtract()([a, b])._mask_source is not None
    assert L.Average()([a, b])._mask_source is not None
    assert L.Dot(axes=2)([a, b])._mask_source is None
    for cls in (L.Maximum, L.Minimum):
        with pytest.raises(NotImplementedError, match=r"receives the mask"):
            cls()([L.Dense(3)(emb), L.Dense(3)(emb)])
    assert _keras_tensor is not None


def test_default_names_and_attributes_are_kerass():
    assert L.Subtract().name.startswith("subtract") and L.Average().name.startswith("average")
    assert L.Maximum().name.startswith("maximum") and L.Minimum().name.startswith("minimum")
    dot = L.Dot(axes=(1, 2), normalize=True)
    assert dot.name.startswith("dot") and dot.axes == (1, 2) and dot.normalize is True
    assert L.Dot(1).get_config()["axes"] == 1 and L.Dot(1).normalize is False
    for layer in (L.Subtract(), L.Average(), L.Maximum(), L.Minimum(), L.Dot(-1), L.Dot((2, 1), normalize=True)):
        again = type(layer).from_config(layer.get_config())
        assert {k: v for k, v in again.get_config().items() if k != "name"} == \
            {k: v for k, v in layer.get_config().items() if k != "name"}


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: L.Dot(axes="1"), TypeError, r"Invalid type for argument `axes`: it should be a list or an int"),
    (lambda: L.Dot(axes=(1, 2, 3)), ValueError, r"it should contain two elements. Received: axes=\(1, 2, 3\)"),
    (lambda: L.Dot(axes=(1, 1.5)), ValueError, r"list elements should be integers"),
])
def test_bad_arguments_raise_kerass_errors(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


@pytest.mark.parametrize("shapes, merge, pattern", [
    ([(3,), (4,)], lambda h: L.Subtract(name="sub")(h), r'"sub".*Inputs have incompatible shapes. Received shapes '
                                                        r"\(3,\) and \(4,\)"),
    ([(3, 4), (2, 4)], lambda h: L.Maximum(name="mx")(h), r'"mx".*incompatible shapes'),
    ([(3,), (3,), (3,)], lambda h: L.Subtract(name="sub3")(h), r"should be called on exactly 2 inputs"),
    ([(3,), (3,), (3,)], lambda h: L.Dot(1, name="dot3")(h), r"should be called on a list of 2 inputs"),
    ([(3,), (4,)], lambda h: L.Dot(1, name="d")(h), r"Incompatible input shapes: axis values 3 \(at axis 1\) != 4 "
                                                    r"\(at axis 1\)"),
    ([(3,), (3,)], lambda h: L.Dot((0, 1), name="d0")(h), r"Cannot perform batch_dot over axis 0"),
    ([(3,), (3,)], lambda h: L.Dot(2, name="d2")(h), r"out of range"),
])
def test_bad_input_shapes_raise_kerass_errors(shapes, merge, pattern):
    with pytest.raises(ValueError, match=pattern):
        merge([keras.Input(s) for s in shapes])
