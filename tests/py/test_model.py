"""The Keras front end end to end: build, compile, fit, evaluate, predict, save/load."""
import json

import numpy as np
import pytest

import mdtrain as tf
from conftest import compile_mlp, make_mlp


def test_fit_learns_and_returns_history(blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    history = model.fit(x, y, epochs=3, batch_size=32, verbose=0)
    assert isinstance(history, tf.keras.callbacks.History)
    assert set(history.history) == {"loss", "accuracy"}
    assert len(history.history["loss"]) == 3
    assert history.history["loss"][-1] < history.history["loss"][0]
    loss, acc = model.evaluate(x, y, verbose=0)
    assert acc > 0.95
    assert model.predict(x[:7], verbose=0).shape == (7, 3)


def test_epoch_loss_is_exact_mean_over_samples(blobs):
    """evaluate's loss equals the mean per-sample loss computed from predict, for any batch size."""
    x, y = blobs
    model = compile_mlp(make_mlp())
    logits = model.predict(x, batch_size=64).astype(np.float64)
    z = logits - logits.max(axis=1, keepdims=True)
    per_sample = np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]
    for batch_size in (1, 7, 32, 600, 1000):
        loss = model.evaluate(x, y, batch_size=batch_size, verbose=0)[0]
        assert loss == pytest.approx(per_sample.mean(), rel=1e-5)


def test_dense_defaults_are_keras_defaults():
    model = make_mlp(hidden=64, input_dim=100)
    kernel, bias = model.layers[0].get_weights()
    limit = np.sqrt(6 / (100 + 64))  # glorot_uniform
    assert kernel.shape == (100, 64) and bias.shape == (64,)
    assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.9 * limit
    assert abs(kernel.std() - limit / np.sqrt(3)) < 0.05 * limit
    assert np.all(bias == 0)
    config = tf.keras.optimizers.Adam().get_config()
    assert (config["learning_rate"], config["beta_1"], config["beta_2"], config["epsilon"]) == (0.001, 0.9, 0.999, 1e-7)


def test_seed_makes_runs_bitwise_reproducible(blobs):
    x, y = blobs
    runs = []
    for _ in range(2):
        model = compile_mlp(make_mlp(seed=123, dropout=0.2))
        model.fit(x, y, epochs=2, batch_size=16, verbose=0)
        runs.append(model.get_weights())
    for a, b in zip(*runs):
        assert np.array_equal(a, b)


def test_save_load_continue_equals_straight_through(tmp_path, blobs):
    x, y = blobs
    straight = compile_mlp(make_mlp(seed=5))
    straight.fit(x, y, epochs=2, batch_size=32, verbose=0, shuffle=False)

    first = compile_mlp(make_mlp(seed=5))
    first.fit(x, y, epochs=1, batch_size=32, verbose=0, shuffle=False)
    path = tmp_path / "model.mdtrain"
    first.save(path)
    restored = tf.keras.models.load_model(path)
    assert restored.optimizer.iterations == first.optimizer.iterations == 19
    assert isinstance(restored.optimizer, tf.keras.optimizers.Adam)
    assert restored.loss.get_config()["from_logits"] is True
    restored.fit(x, y, epochs=1, batch_size=32, verbose=0, shuffle=False)
    for a, b in zip(straight.get_weights(), restored.get_weights()):
        assert np.array_equal(a, b)


def test_save_is_atomic_and_keeps_previous_file_on_failure(tmp_path, blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    model.fit(x, y, epochs=1, verbose=0)
    path = tmp_path / "m.mdtrain"
    model.save(path)
    before = path.read_bytes()
    with pytest.raises(OSError):
        model.save(tmp_path / "missing_dir" / "m.mdtrain")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.mdtrain"]


def test_load_model_errors(tmp_path, blobs):
    with pytest.raises(FileNotFoundError, match="no file"):
        tf.keras.models.load_model(tmp_path / "nope.mdtrain")
    x, y = blobs
    model = compile_mlp(make_mlp())
    model.fit(x, y, epochs=1, verbose=0)
    path = tmp_path / "m.mdtrain"
    model.save(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "corrupt.mdtrain").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupt"):
        tf.keras.models.load_model(tmp_path / "corrupt.mdtrain")
    (tmp_path / "short.mdtrain").write_bytes(bytes(data[:100]))
    with pytest.raises(ValueError):
        tf.keras.models.load_model(tmp_path / "short.mdtrain")


def test_get_set_weights_round_trip(blobs):
    model = make_mlp()
    weights = [w + 1 for w in model.get_weights()]
    model.set_weights(weights)
    for a, b in zip(model.get_weights(), weights):
        assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="shape"):
        model.set_weights([np.zeros((2, 2))] * 4)


def test_sequential_add_and_input(blobs):
    model = tf.keras.Sequential()
    model.add(tf.keras.Input(shape=(20,)))
    model.add(tf.keras.layers.Dense(8, activation="tanh"))
    model.add(tf.keras.layers.Dropout(0.1))
    model.add(tf.keras.layers.Dense(3, activation="softmax"))
    assert model.built and model.output_shape == (None, 3)
    assert model.count_params() == 20 * 8 + 8 + 8 * 3 + 3
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    x, y = blobs
    model.fit(x, y, epochs=1, verbose=0)
    lines = []
    model.summary(print_fn=lines.append)
    assert any("dense" in line and "(None, 8)" in line for line in lines)
    # As Keras 3: once trained, the totals count the optimizer's variables (2 Adam slots per
    # weight, its iteration count and learning rate).
    assert any("Trainable params: 195 " in line for line in lines)
    assert any("Optimizer params: 392 " in line for line in lines)
    assert any("Total params: 587 " in line for line in lines)


def test_model_builds_lazily_from_data(blobs):
    x, y = blobs
    model = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(3)])
    assert not model.built
    compile_mlp(model)
    model.fit(x, y, epochs=1, verbose=0)
    assert model.input_shape == (None, 20)


def test_inputs_are_converted_like_keras(blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    model.fit(x.astype(np.float64), y.astype(np.uint8), epochs=1, verbose=0)
    fortran = np.asfortranarray(x)
    strided = np.repeat(x, 2, axis=0)[::2]
    assert np.allclose(model.predict(fortran), model.predict(x))
    assert np.allclose(model.predict(strided), model.predict(x))
    assert np.allclose(model.predict(x.tolist()), model.predict(x))
    model.fit(x.astype(np.float32), y.astype(np.float32), epochs=1, verbose=0)


def test_train_on_batch_and_test_on_batch(blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    logs = model.train_on_batch(x[:32], y[:32], return_dict=True)
    assert set(logs) == {"loss", "accuracy"}
    assert model.optimizer.iterations == 1
    assert len(model.test_on_batch(x[:32], y[:32])) == 2


def test_predict_without_compile(blobs):
    x, _ = blobs
    assert make_mlp().predict(x[:5]).shape == (5, 3)


def test_optimizer_learning_rate_is_live(blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    model.fit(x, y, epochs=1, verbose=0)
    model.optimizer.learning_rate = 0.0
    before = model.get_weights()
    model.fit(x, y, epochs=1, verbose=0)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_exponential_decay_schedule_trains(blobs):
    x, y = blobs
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=10, decay_rate=0.5)
    assert schedule(10) == pytest.approx(0.005)
    model = compile_mlp(make_mlp(), optimizer=tf.keras.optimizers.SGD(schedule, momentum=0.9))
    model.fit(x, y, epochs=1, batch_size=60, verbose=0)
    assert model.optimizer.learning_rate == pytest.approx(0.01 * 0.5 ** (10 / 10))


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw", "rmsprop", "adagrad"])
def test_every_optimizer_trains(optimizer, blobs):
    x, y = blobs
    model = compile_mlp(make_mlp(), optimizer=optimizer)
    history = model.fit(x, y, epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_softmax_with_from_logits_warns_and_trains_on_the_logits(blobs):
    """As Keras does: warn, then compute the crossentropy from the softmax's input, so the model
    trains exactly like the same model with a linear output."""
    x, y = blobs

    def make(activation):
        tf.keras.utils.set_random_seed(7)
        return tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(20,)),
                                    tf.keras.layers.Dense(3, activation=activation)])

    softmax, linear = make("softmax"), make(None)
    with pytest.warns(UserWarning, match="from_logits=True"):
        softmax.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    linear.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h1 = softmax.fit(x, y, epochs=2, verbose=0)
    h2 = linear.fit(x, y, epochs=2, verbose=0)
    assert h1.history["loss"] == h2.history["loss"]
    for a, b in zip(softmax.get_weights(), linear.get_weights()):
        assert np.array_equal(a, b)
    probabilities = softmax.predict(x[:5])
    assert np.allclose(probabilities.sum(axis=1), 1, atol=1e-6)


def test_validation_split_and_data(blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    history = model.fit(x, y, epochs=1, validation_split=0.25, verbose=0)
    assert {"val_loss", "val_accuracy"} <= set(history.history)
    history = model.fit(x, y, epochs=1, validation_data=(x[:50], y[:50]), verbose=0)
    assert "val_loss" in history.history


def test_steps_per_epoch_and_initial_epoch(blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    history = model.fit(x, y, epochs=3, initial_epoch=1, steps_per_epoch=5, batch_size=10, verbose=0)
    assert history.epoch == [1, 2]
    assert model.optimizer.iterations == 10


def test_progress_bar_prints(blobs, capsys):
    x, y = blobs
    model = compile_mlp(make_mlp())
    model.fit(x, y, epochs=2, batch_size=100, verbose=1)
    out = capsys.readouterr().out
    assert "Epoch 1/2" in out and "Epoch 2/2" in out and "6/6" in out and "loss:" in out


def test_early_stopping_and_checkpoint_and_csv(tmp_path, blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    ckpt = tmp_path / "ckpt-{epoch:02d}.mdtrain"
    history = model.fit(x, y, epochs=4, verbose=0, validation_split=0.2, callbacks=[
        tf.keras.callbacks.ModelCheckpoint(str(ckpt)),
        tf.keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
        tf.keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10.0),
    ])
    assert len(history.epoch) == 2  # no epoch improves by 10: stops after patience 0 + 1
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == ["ckpt-01.mdtrain", "ckpt-02.mdtrain"]
    reloaded = tf.keras.models.load_model(tmp_path / "ckpt-02.mdtrain")
    assert all(np.array_equal(a, b) for a, b in zip(reloaded.get_weights(), model.get_weights()))
    rows = (tmp_path / "log.csv").read_text().splitlines()
    assert rows[0].split(",")[0] == "epoch" and len(rows) == 3


def test_nan_in_data_is_reported_at_its_step(blobs):
    x, y = blobs
    x = x.copy()
    x[100] = np.nan  # sample 100: batch 4 (0-based 3) without shuffling at batch 32
    model = compile_mlp(make_mlp())
    with pytest.warns(RuntimeWarning, match=r"epoch 1, step 4"):
        model.fit(x, y, epochs=1, batch_size=32, shuffle=False, verbose=0)


def test_terminate_on_nan_stops_at_the_step(blobs):
    x, y = blobs
    x = x.copy()
    x[100] = np.nan
    model = compile_mlp(make_mlp())
    seen = []
    cb = tf.keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: seen.append(batch))
    with pytest.warns(RuntimeWarning):
        history = model.fit(x, y, epochs=3, batch_size=32, shuffle=False, verbose=0,
                            callbacks=[cb, tf.keras.callbacks.TerminateOnNaN()])
    assert seen == [0, 1, 2, 3]
    assert len(history.epoch) == 1


def test_model_config_is_json(blobs):
    config = make_mlp().get_config()
    json.dumps(config)
    # Keras 3's layout: a built Sequential model's config starts with its InputLayer.
    assert [layer["class_name"] for layer in config["layers"]] == ["InputLayer", "Dense", "Dense"]
    assert config["layers"][1]["config"]["units"] == 16


def test_ctrl_c_stops_a_long_fit_promptly():
    """The loop runs in C++ without the GIL; it still comes back for signals between steps."""
    import os
    import signal
    import threading

    rng = np.random.default_rng(0)
    x = rng.normal(size=(20000, 256)).astype(np.float32)
    y = rng.integers(0, 10, 20000)
    model = tf.keras.Sequential([tf.keras.layers.Dense(512, activation="relu", input_shape=(256,)),
                                 tf.keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # Python raises KeyboardInterrupt only where SIGINT is not inherited as ignored (as it is in a
    # job started in the background by a shell without job control): install its handler here.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            model.fit(x, y, epochs=1000, batch_size=32, verbose=0)
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    # Interrupted early in the run (625 steps an epoch), not after its 1000 epochs.
    assert 0 < model.optimizer.iterations < 100 * 625
    model.fit(x[:64], y[:64], epochs=1, verbose=0)  # the model is still usable
