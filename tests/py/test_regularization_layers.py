"""The noise and regularization layers (GaussianNoise, GaussianDropout, SpatialDropout1D/2D,
ActivityRegularization) against Keras 3 on TF (skipped without it). Random numbers cannot match
TF's: in inference the noise layers are the identity, as Keras's (predictions of models loaded
both ways); in training their noise has Keras's statistics (mean, variance, the fraction of
dropped channels, whole channels dropped together), is drawn anew each step, and does not depend
on the replica split (MirroredStrategy on 2 devices trains as one). ActivityRegularization's
penalty is added to the loss as Keras 3 adds it (divided by the batch size, an uneven last batch
too): losses, evaluate and weights after SGD epochs match Keras. ONNX files are the identity;
configs, masks and bad arguments as Keras's."""
import importlib.util

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

keras = tf.keras
L = keras.layers

# name: (input shape without the batch, the layer as Keras writes it, its config besides name,
# trainable, dtype and seed)
NOISE = {
    "gaussian_noise": ((6,), "L.GaussianNoise(0.3, seed=11)", {"stddev": 0.3}),
    "gaussian_dropout": ((6,), "L.GaussianDropout(0.4, seed=12)", {"rate": 0.4}),
    "spatial_dropout1d": ((5, 4), "L.SpatialDropout1D(0.5, seed=13)", {"rate": 0.5}),
    "spatial_dropout2d": ((3, 4, 2), "L.SpatialDropout2D(0.25, seed=14)",
                          {"rate": 0.25, "data_format": "channels_last"}),
    "activity_regularization": ((6,), "L.ActivityRegularization(l1=0.01, l2=0.05)", {"l1": 0.01, "l2": 0.05}),
}


def data(shape, rows=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (rows, *shape)).astype(np.float32), rng.uniform(-1, 1, (rows, 3)).astype(np.float32)


def model_of(name, seed=0, layer=None):
    """Input -> Dense -> the layer -> Flatten -> Dense(3), SGD on mse."""
    shape, expr, _ = NOISE[name]
    tf.keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input(shape), L.Dense(shape[-1], name="before"),
                              layer if layer is not None else eval(expr),  # noqa: S307 (the cases above)
                              L.Flatten(), L.Dense(3, name="after")])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def _config(layer):
    return {k: v for k, v in layer.get_config().items() if k not in ("name", "trainable", "dtype", "seed")}


@pytest.fixture(scope="module")
def keras_runs(tmp_path_factory):
    """Keras's predictions of mdtrain's .keras file of each model, the layer's config, its own
    .keras file; and, for ActivityRegularization, Keras's losses, evaluate loss and weights after 3
    SGD epochs with an uneven last batch."""
    tmp = tmp_path_factory.mktemp("regularization")
    for name, (shape, _, _) in NOISE.items():
        x, y = data(shape)
        np.savez(tmp / f"data_{name}.npz", x=x, y=y)
        model_of(name).save(tmp / f"ours_{name}.keras")
    run_keras(f"""
        import numpy as np, keras
        for name in {sorted(NOISE)!r}:
            d = np.load(f"data_{{name}}.npz")
            m = keras.models.load_model(f"ours_{{name}}.keras", compile=False)
            layer = m.layers[1]
            out = m.predict(d["x"], verbose=0)
            alone = np.asarray(layer(m.layers[0](d["x"]), training=False))
            config = {{k: v for k, v in layer.get_config().items() if k not in ("name", "trainable", "dtype")}}
            m.save(f"keras_{{name}}.keras")
            results = [out, alone]
            if name == "activity_regularization":
                m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
                h = m.fit(d["x"], d["y"], batch_size=5, epochs=3, shuffle=False, verbose=0)
                results += [np.array(h.history["loss"]), np.array(m.evaluate(d["x"], d["y"], batch_size=5,
                                                                             verbose=0)), *m.get_weights()]
            np.savez(f"keras_{{name}}.npz", *results)
            with open(f"config_{{name}}.txt", "w") as f:
                f.write(repr((type(layer).__name__, config)))
    """, tmp, timeout=900)
    return tmp


@pytest.mark.parametrize("name", sorted(NOISE))
def test_inference_is_the_identity_as_kerass(keras_runs, name):
    shape, _, config = NOISE[name]
    x, _ = data(shape)
    model = model_of(name)
    theirs = np.load(keras_runs / f"keras_{name}.npz")
    np.testing.assert_allclose(model.predict(x, verbose=0), theirs["arr_0"], rtol=1e-5, atol=1e-6)
    hidden = model.layers[0](x).numpy()
    np.testing.assert_allclose(theirs["arr_1"], hidden, rtol=1e-6, atol=1e-6)  # Keras's layer: the identity
    np.testing.assert_array_equal(model.layers[1](hidden).numpy(), hidden)  # ours too
    cls, keras_config = eval(open(keras_runs / f"config_{name}.txt").read())  # noqa: S307 (our own file)
    assert cls == type(model.layers[1]).__name__
    assert keras_config.get("seed") == getattr(model.layers[1], "seed", None)  # ActivityRegularization: none
    assert {k: v for k, v in keras_config.items() if k != "seed"} == config


@pytest.mark.parametrize("name", sorted(NOISE))
def test_kerass_keras_file_loads_with_its_config(keras_runs, name):
    shape, _, config = NOISE[name]
    x, _ = data(shape)
    loaded = keras.models.load_model(keras_runs / f"keras_{name}.keras")
    assert type(loaded.layers[1]).__name__ == type(model_of(name).layers[1]).__name__
    assert _config(loaded.layers[1]) == config
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model_of(name).predict(x, verbose=0), rtol=1e-6,
                               atol=1e-6)


def test_activity_regularization_trains_as_keras_with_an_uneven_last_batch(keras_runs):
    x, y = data((6,))
    model = model_of("activity_regularization")
    theirs = np.load(keras_runs / "keras_activity_regularization.npz")
    history = model.fit(x, y, batch_size=5, epochs=3, shuffle=False, verbose=0)  # 5, 5, 5, 1 rows
    np.testing.assert_allclose(history.history["loss"], theirs["arr_2"], rtol=1e-5)
    np.testing.assert_allclose(model.evaluate(x, y, batch_size=5, verbose=0), theirs["arr_3"], rtol=1e-5)
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_allclose(w, theirs[f"arr_{i + 4}"], rtol=1e-5, atol=1e-6, err_msg=f"weight {i}")
    # The penalty is in the loss: without it the loss and weights differ.
    plain = model_of("activity_regularization", layer=L.ActivityRegularization())
    plain_history = plain.fit(x, y, batch_size=5, epochs=3, shuffle=False, verbose=0)
    assert plain_history.history["loss"][0] < history.history["loss"][0] - 1e-3


def test_activity_penalty_is_added_divided_by_the_batch_size():
    # Dense(kernel 1, bias 0) -> ActivityRegularization: the first epoch's loss on one batch is the
    # mse plus (l1 sum|h| + l2 sum h^2) / rows, h the Dense outputs before the step.
    x, y = data((6,), rows=8)
    model = model_of("activity_regularization")
    h = model.layers[0](x).numpy()
    out = model.predict(x, verbose=0)
    expected = np.mean((out - y) ** 2) + (0.01 * np.abs(h).sum() + 0.05 * (h ** 2).sum()) / len(x)
    np.testing.assert_allclose(model.evaluate(x, y, batch_size=8, verbose=0), expected, rtol=1e-5)
    history = model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    np.testing.assert_allclose(history.history["loss"][0], expected, rtol=1e-5)


def _training_output(layer, x, calls=1):
    out = None
    for _ in range(calls):
        out = layer(x, training=True).numpy()
    return out


def test_gaussian_noise_has_the_stddev_and_zero_mean_in_training_only():
    x = np.random.default_rng(1).uniform(-1, 1, (400, 50)).astype(np.float32)
    layer = L.GaussianNoise(0.3, seed=5)
    noise = _training_output(layer, x) - x
    assert abs(noise.mean()) < 0.01 and abs(noise.std() - 0.3) < 0.01
    assert abs(np.corrcoef(noise[:, :-1].ravel(), noise[:, 1:].ravel())[0, 1]) < 0.03  # independent elements
    again = _training_output(layer, x) - x
    assert not np.allclose(noise, again)  # a new draw each step
    np.testing.assert_array_equal(layer(x).numpy(), x)  # inference: the identity


def test_gaussian_dropout_multiplies_by_mean_one_noise_of_kerass_stddev():
    x = np.random.default_rng(2).uniform(0.5, 1, (400, 50)).astype(np.float32)
    layer = L.GaussianDropout(0.2, seed=6)
    multiplier = _training_output(layer, x) / x
    assert abs(multiplier.mean() - 1) < 0.01 and abs(multiplier.std() - np.sqrt(0.2 / 0.8)) < 0.01
    np.testing.assert_array_equal(layer(x).numpy(), x)


@pytest.mark.parametrize("layer, shape", [(lambda: L.SpatialDropout1D(0.3, seed=7), (20, 8)),
                                          (lambda: L.SpatialDropout2D(0.3, seed=8), (4, 5, 8))])
def test_spatial_dropout_drops_whole_channels_at_the_rate(layer, shape):
    x = np.random.default_rng(3).uniform(0.5, 1, (500, *shape)).astype(np.float32)
    y = _training_output(layer(), x)
    ratio = (y / x).reshape(len(x), -1, shape[-1])  # (rows, positions, channels)
    kept = ratio[:, 0, :] != 0
    # Every position of a channel shares its example's decision: 0, or 1 / (1 - rate).
    np.testing.assert_allclose(ratio, np.broadcast_to(ratio[:, :1, :], ratio.shape), rtol=1e-6)
    np.testing.assert_allclose(ratio[:, 0, :][kept], 1 / 0.7, rtol=1e-6)
    assert abs((~kept).mean() - 0.3) < 0.03
    # Different examples and channels draw independently.
    assert 0 < kept.mean(axis=0).min() and kept.mean(axis=0).max() < 1


def test_training_noise_does_not_depend_on_the_replica_split(logical_cpus):
    logical_cpus(2)
    for name, (shape, _, _) in NOISE.items():
        x, y = data(shape)
        one = model_of(name)
        one.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
            two = model_of(name)
        history = two.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        for a, b in zip(one.get_weights(), two.get_weights()):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)
        # the noise acted: training differs from the same model without the layer's noise
        quiet = model_of(name, layer=L.Identity())
        quiet.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        assert not np.allclose(quiet.get_weights()[0], one.get_weights()[0], atol=1e-6), name
        assert np.isfinite(history.history["loss"]).all()


def test_keras_archive_round_trip_keeps_every_layer(tmp_path):
    for name, (shape, _, _) in NOISE.items():
        x, y = data(shape)
        model = model_of(name)
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        model.save(tmp_path / f"{name}.keras")
        loaded = keras.models.load_model(tmp_path / f"{name}.keras")
        assert loaded.layers[1].get_config() == model.layers[1].get_config()
        np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0), err_msg=name)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")
def test_onnx_files_are_the_identity_at_inference(tmp_path):
    import onnxruntime
    for name, (shape, _, _) in NOISE.items():
        x, _ = data(shape, rows=5)
        model = model_of(name)
        path = tmp_path / f"{name}.onnx"
        model.export(str(path), format="onnx", verbose=False)
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = session.run(None, {session.get_inputs()[0].name: x})[0]
        np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=1e-6, atol=1e-6, err_msg=name)


def test_the_layers_pass_masks_on():
    from mdtrain.keras.layers import mask_after
    for name, (_, expr, _) in NOISE.items():
        assert mask_after(eval(expr), "embedding") == "embedding", name  # noqa: S307 (the cases above)
        assert eval(expr).supports_masking  # noqa: S307


def test_default_names_seeds_and_arguments_are_kerass():
    assert L.GaussianNoise(0.1).name.startswith("gaussian_noise")
    assert L.GaussianDropout(0.1).name.startswith("gaussian_dropout")
    assert L.SpatialDropout1D(0.1).name.startswith("spatial_dropout1d")
    assert L.SpatialDropout2D(0.1).name.startswith("spatial_dropout2d")
    assert L.ActivityRegularization().name.startswith("activity_regularization")
    reg = L.ActivityRegularization()
    assert reg.l1 == 0.0 and reg.l2 == 0.0
    assert L.SpatialDropout2D(0.1).data_format == "channels_last"
    assert L.GaussianNoise(0.1, seed=3).seed == 3 and isinstance(L.GaussianNoise(0.1).seed, int)
    assert "trainable" not in L.SpatialDropout1D(0.1).get_config()  # Keras's config has none
    for layer in (L.GaussianNoise(0.2), L.GaussianDropout(0.3), L.SpatialDropout1D(0.4), L.SpatialDropout2D(0.5),
                  L.ActivityRegularization(0.1, 0.2)):
        again = type(layer).from_config(layer.get_config())
        assert {k: v for k, v in again.get_config().items() if k != "name"} == \
            {k: v for k, v in layer.get_config().items() if k != "name"}


def test_activity_regularization_is_refused_where_its_penalty_would_be_lost():
    x, y = data((6,), rows=8)
    layer = L.ActivityRegularization(l1=0.1)
    with pytest.raises(ValueError, match=r"ActivityRegularization layer .*custom training loops do not collect it"):
        layer(x, training=True)
    np.testing.assert_array_equal(layer(x).numpy(), x)  # inference: the identity
    assert L.ActivityRegularization()(x, training=True).numpy().shape == x.shape  # no penalty: nothing to lose


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: L.GaussianNoise(1.5), ValueError, r"Expected a float value between 0 and 1. Received: stddev=1.5"),
    (lambda: L.GaussianNoise("a"), TypeError, r"stddev must be a number"),
    (lambda: L.GaussianDropout(-0.1), ValueError, r"Expected a float value between 0 and 1. Received: rate=-0.1"),
    (lambda: L.GaussianDropout(1.0), ValueError, r"rate=1 gives the noise an infinite standard deviation"),
    (lambda: L.SpatialDropout1D(2.0), ValueError, r"Expected a float value between 0 and 1. Received: rate=2"),
    (lambda: L.SpatialDropout2D(0.1, data_format="channels_first"), ValueError,
     r"data_format='channels_first' is not supported"),
    (lambda: L.SpatialDropout2D(0.1, data_format="nchw"), ValueError, r"The `data_format` argument must be one of"),
    (lambda: L.ActivityRegularization(l1=-1), ValueError, r"Invalid value for argument l1: expected a non-negative "
                                                          r"float"),
    (lambda: L.ActivityRegularization(l2=float("inf")), ValueError, r"Invalid value for argument l2"),
    (lambda: L.GaussianNoise(0.1, seed=1.5), TypeError, r"seed must be an integer or None"),
])
def test_bad_arguments_raise_kerass_errors(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


@pytest.mark.parametrize("layer, shape, pattern", [
    (lambda: L.SpatialDropout1D(0.1), (4,), r"expected ndim=3, found ndim=2"),
    (lambda: L.SpatialDropout2D(0.1), (4, 3), r"expected ndim=4, found ndim=3"),
])
def test_bad_input_shapes_raise_kerass_errors(layer, shape, pattern):
    with pytest.raises(ValueError, match=pattern):
        keras.Sequential([keras.Input(shape), layer()])


def test_a_strategy_that_does_not_collect_activity_losses_refuses_the_layer(logical_cpus):
    import warnings
    logical_cpus(2)
    distribution = keras.distribution
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
    x, y = data((6,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipeline = distribution.PipelineParallel(mesh, num_microbatches=2)
    with pipeline.scope():
        model = keras.Sequential([keras.Input((6,)), L.Dense(6), L.ActivityRegularization(l2=0.1), L.PipelineSplit(),
                                  L.Dense(3)])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    with pytest.raises(ValueError, match=r"ActivityRegularization layer .* does not collect yet"):
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
