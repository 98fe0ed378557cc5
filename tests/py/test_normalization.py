"""BatchNormalization and LayerNormalization from Python: weights and parameter counts as Keras
reports them, values against Keras's formulas, training under MirroredStrategy (synchronized and
per replica), save/load, configs and argument errors."""
import numpy as np
import pytest

import mdtrain as tf

layers = tf.keras.layers


def _bn_mlp(seed=0, synchronized=False, momentum=0.99):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([
        layers.Dense(16, input_shape=(20,)),
        layers.BatchNormalization(synchronized=synchronized, momentum=momentum),
        layers.Activation("relu"),
        layers.Dense(3),
    ])


def _compile(model, optimizer=None):
    model.compile(optimizer=optimizer or tf.keras.optimizers.Adam(0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


# ---- weights and counts -----------------------------------------------------------------------

def test_parameter_counts_and_weight_lists_match_keras(capsys):
    model = tf.keras.Sequential([layers.Dense(64, input_shape=(10,)), layers.BatchNormalization(),
                                 layers.Dense(3)])
    bn = model.layers[1]
    assert bn.name.startswith("batch_normalization")
    # Keras: BatchNormalization on 64 features has 256 parameters, 128 of them non-trainable.
    assert bn.count_params() == 256
    assert [w.shape for w in bn.weights] == [(64,)] * 4
    gamma, beta, moving_mean, moving_variance = bn.get_weights()
    assert np.all(gamma == 1) and np.all(beta == 0) and np.all(moving_mean == 0) and np.all(moving_variance == 1)
    assert len(bn.trainable_weights) == 2 and len(bn.non_trainable_weights) == 2
    assert np.array_equal(bn.moving_variance, moving_variance) and np.array_equal(bn.gamma, gamma)
    assert model.count_params() == 704 + 256 + 195
    assert len(model.weights) == 2 + 4 + 2
    assert len(model.trainable_weights) == 6
    assert [w.shape for w in model.non_trainable_weights] == [(64,), (64,)]
    model.summary()
    out = capsys.readouterr().out
    assert "Total params: 1,155" in out
    assert "Trainable params: 1,027" in out
    assert "Non-trainable params: 128 (512.00 B)" in out
    # A frozen layer reports every weight as non-trainable, as Keras does.
    bn.trainable = False
    assert bn.trainable_weights == [] and len(bn.non_trainable_weights) == 4


def test_center_and_scale_off_drop_beta_and_gamma():
    model = tf.keras.Sequential([layers.BatchNormalization(center=False, input_shape=(5,)),
                                 layers.LayerNormalization(scale=False)])
    bn, ln = model.layers
    assert bn.count_params() == 15 and bn.beta is None and bn.gamma.shape == (5,)
    assert len(bn.trainable_weights) == 1 and len(bn.non_trainable_weights) == 2
    assert ln.count_params() == 5 and ln.gamma is None and ln.beta.shape == (5,)
    assert len(ln.trainable_weights) == 1 and ln.non_trainable_weights == []


# ---- values against Keras's formulas ------------------------------------------------------------

def test_batch_norm_training_and_inference_follow_keras_formulas():
    x = np.array([[1, 2, -1], [3, 6, 0], [5, 10, 4], [7, 2, 1]], dtype=np.float32)
    model = tf.keras.Sequential([layers.BatchNormalization(momentum=0.9, epsilon=1e-3, input_shape=(3,))])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.0), loss="mse")  # lr 0: only the statistics move
    model.train_on_batch(x, np.zeros_like(x))
    mean, var = x.astype(np.float64).mean(axis=0), x.astype(np.float64).var(axis=0)  # biased, as ops.moments
    _, _, moving_mean, moving_variance = model.get_weights()
    np.testing.assert_allclose(moving_mean, 0.9 * 0 + 0.1 * mean, rtol=1e-6)
    np.testing.assert_allclose(moving_variance, 0.9 * 1 + 0.1 * var, rtol=1e-6)
    # Training output (its loss): mse of the batch-normalized x against 0.
    train_out = (x - mean) / np.sqrt(var + 1e-3)
    loss = model.test_on_batch(x, np.zeros_like(x))  # inference: moving statistics
    infer_out = (x - moving_mean) / np.sqrt(moving_variance + 1e-3)
    np.testing.assert_allclose(model.predict(x, verbose=0), infer_out, rtol=1e-5, atol=1e-6)
    assert loss == pytest.approx(float(np.mean(infer_out ** 2)), rel=1e-5)
    logs = model.train_on_batch(x, np.zeros_like(x), return_dict=True)
    assert logs["loss"] == pytest.approx(float(np.mean(train_out ** 2)), rel=1e-5)


def test_batch_norm_on_feature_maps_normalizes_over_batch_and_positions():
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(4, 3, 3, 2)) * [1.0, 5.0] + [2.0, -3.0]).astype(np.float32)
    model = tf.keras.Sequential([layers.BatchNormalization(momentum=0.5, input_shape=(3, 3, 2))])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.0), loss="mse")
    model.train_on_batch(x, np.zeros_like(x))
    flat = x.reshape(-1, 2).astype(np.float64)
    np.testing.assert_allclose(model.layers[0].moving_mean, 0.5 * flat.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(model.layers[0].moving_variance, 0.5 + 0.5 * flat.var(axis=0), rtol=1e-5)


def test_layer_norm_follows_keras_formula():
    rng = np.random.default_rng(2)
    x = (rng.normal(size=(5, 2, 6)) * 3 + 1).astype(np.float32)
    model = tf.keras.Sequential([layers.LayerNormalization(epsilon=1e-3, input_shape=(2, 6))])
    gamma = rng.uniform(0.5, 2, size=6).astype(np.float32)
    beta = rng.uniform(-1, 1, size=6).astype(np.float32)
    model.set_weights([gamma, beta])
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=-1, keepdims=True), x64.var(axis=-1, keepdims=True)
    expected = gamma * (x64 - mean) / np.sqrt(var + 1e-3) + beta
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, rtol=1e-5, atol=1e-5)


# ---- MirroredStrategy ---------------------------------------------------------------------------

@pytest.mark.parametrize("synchronized", [False, True])
def test_fits_under_mirrored_strategy_with_replicas_identical(logical_cpus, blobs, synchronized):
    x, y = blobs
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = _compile(_bn_mlp(seed=5, synchronized=synchronized))
    checked = []

    def check(batch, logs):
        w0, w1 = model._core.replica_weights(0), model._core.replica_weights(1)
        assert len(w0) == 8
        assert all(np.array_equal(a, b) for a, b in zip(w0, w1))  # moving statistics included
        checked.append(batch)

    # 600 rows in batches of 64: the last has 24; then batches of 1 (one replica without rows).
    history = model.fit(x, y, epochs=3, batch_size=64, verbose=0,
                        callbacks=[tf.keras.callbacks.LambdaCallback(on_train_batch_end=check)])
    assert len(checked) == 30
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert history.history["accuracy"][-1] > 0.9
    model.fit(x[:3], y[:3], epochs=1, batch_size=1, verbose=0,
              callbacks=[tf.keras.callbacks.LambdaCallback(on_train_batch_end=check)])
    moving_variance = model.layers[1].moving_variance
    assert not np.allclose(moving_variance, 1.0)
    assert model.evaluate(x, y, verbose=0, return_dict=True)["accuracy"] > 0.9


def test_synchronized_equals_one_replica_on_the_whole_batch(logical_cpus, blobs):
    x, y = blobs
    single = _compile(_bn_mlp(seed=6, synchronized=True, momentum=0.9), tf.keras.optimizers.SGD(0.1))
    single.fit(x[:100], y[:100], epochs=1, batch_size=30, shuffle=False, verbose=0)  # 30, 30, 30, 10
    logical_cpus(4)
    with tf.distribute.MirroredStrategy().scope():
        mirrored = _compile(_bn_mlp(seed=6, synchronized=True, momentum=0.9), tf.keras.optimizers.SGD(0.1))
    mirrored.fit(x[:100], y[:100], epochs=1, batch_size=30, shuffle=False, verbose=0)
    for a, b in zip(single.get_weights(), mirrored.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


# ---- saving, configs ----------------------------------------------------------------------------

def test_save_and_load_keep_moving_statistics_and_settings(tmp_path, blobs):
    x, y = blobs
    model = _compile(_bn_mlp(seed=7, synchronized=True, momentum=0.8))
    model.fit(x, y, epochs=1, batch_size=100, verbose=0)
    path = tmp_path / "bn.mdt"
    model.save(path)
    loaded = tf.keras.models.load_model(path)
    bn = loaded.layers[1]
    assert type(bn).__name__ == "BatchNormalization"
    assert bn.synchronized is True and bn.momentum == pytest.approx(0.8) and bn.axis == -1
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        assert np.array_equal(a, b)
    assert not np.allclose(bn.moving_mean, 0.0)
    assert len(loaded.non_trainable_weights) == 2 and loaded.count_params() == model.count_params()
    np.testing.assert_array_equal(loaded.predict(x[:50], verbose=0), model.predict(x[:50], verbose=0))


def test_layer_normalization_save_load_and_configs(tmp_path):
    model = tf.keras.Sequential([layers.Dense(4, input_shape=(3,)), layers.LayerNormalization(epsilon=1e-5)])
    model.compile(optimizer="sgd", loss="mse")
    model.save(tmp_path / "ln.mdt")
    loaded = tf.keras.models.load_model(tmp_path / "ln.mdt")
    ln = loaded.layers[1]
    assert type(ln).__name__ == "LayerNormalization" and ln.epsilon == pytest.approx(1e-5)
    config = model.layers[1].get_config()
    clone = layers.LayerNormalization.from_config(config)
    assert clone.get_config() == config
    bn = layers.BatchNormalization(momentum=0.9, center=False, synchronized=True, gamma_regularizer="l2")
    bn_config = bn.get_config()
    assert bn_config["synchronized"] is True and bn_config["center"] is False
    assert layers.BatchNormalization.from_config(bn_config).get_config() == bn_config


# ---- errors -------------------------------------------------------------------------------------

def test_feature_count_mismatch_names_layer_and_shapes():
    model = tf.keras.Sequential([layers.BatchNormalization(name="bn_in", input_shape=(4,))])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=r'layer "bn_in" is incompatible.*value 4.*\(2, 5\)'):
        model.predict(np.zeros((2, 5), np.float32), verbose=0)
    with pytest.raises(ValueError, match=r"bn_in/gamma has shape \(4,\), got \(5,\)"):
        model.layers[0].set_weights([np.ones(5)] * 4)


def test_unsupported_axis_names_layer_and_shapes():
    with pytest.raises(ValueError, match=r'layer "bn_nchw": only axis=-1 .*axis=3 for inputs of shape '
                                         r"\(None, 3, 8, 8\)\) is supported, got axis=1"):
        tf.keras.Sequential([layers.BatchNormalization(axis=1, name="bn_nchw", input_shape=(3, 8, 8))])
    with pytest.raises(ValueError, match=r'layer "ln_mid": only axis=-1.*got axis=1'):
        tf.keras.Sequential([layers.LayerNormalization(axis=1, name="ln_mid", input_shape=(3, 8))])
    with pytest.raises(ValueError, match=r'LayerNormalization "ln_two": only axis=-1.*\[1, 2\]'):
        layers.LayerNormalization(axis=[1, 2], name="ln_two")
    with pytest.raises(ValueError, match=r'"bn_batch": only axis=-1.*got axis=0'):
        layers.BatchNormalization(axis=0, name="bn_batch")
    # The last axis by its index, or as a list of one, is the supported case.
    model = tf.keras.Sequential([layers.BatchNormalization(axis=[3], input_shape=(8, 8, 3))])
    assert model.layers[0].count_params() == 12


def test_bad_argument_types_and_values():
    with pytest.raises(TypeError, match=r'BatchNormalization "bn_t": axis must be an integer'):
        layers.BatchNormalization(axis="last", name="bn_t")
    with pytest.raises(TypeError, match=r'"bn_m": momentum must be a number'):
        layers.BatchNormalization(momentum="0.9", name="bn_m")
    with pytest.raises(ValueError, match=r'"bn_v": momentum must be in \[0, 1\], got 1.5'):
        layers.BatchNormalization(momentum=1.5, name="bn_v")
    with pytest.raises(ValueError, match=r'"ln_e": epsilon must be a finite number >= 0'):
        layers.LayerNormalization(epsilon=-1.0, name="ln_e")
    with pytest.raises(TypeError, match=r'"bn_c": center must be True or False'):
        layers.BatchNormalization(center=1, name="bn_c")
    with pytest.raises(ValueError, match="unknown initializer"):
        layers.BatchNormalization(gamma_initializer="no_such_thing")
    with pytest.raises(NotImplementedError, match="gamma_constraint"):
        layers.BatchNormalization(gamma_constraint="non_neg")
    with pytest.raises(NotImplementedError, match="rms_scaling"):
        layers.LayerNormalization(rms_scaling=True)
