"""Misuse that used to crash, hang or answer wrongly without a word (issue #19): concurrent loops
on one model, integer labels that wrap, swallowed or ignored arguments, an optimizer of another
strategy, BackupAndRestore into a rebuilt model, and unclear errors."""
import os
import threading

import numpy as np
import pytest

import mdtrain as tf
from conftest import compile_mlp, make_mlp


# ---- one loop at a time per model ------------------------------------------------------------
def test_concurrent_fits_on_one_model_never_corrupt_it(blobs):
    """Several threads fit one model at once, over and over: each fit either runs alone or is
    refused with a RuntimeError naming the model as busy; the final weights are those of the fits
    that ran, run one after another."""
    x, y = blobs
    model = make_mlp(seed=3)
    compile_mlp(model)
    reference = make_mlp(seed=3)
    compile_mlp(reference)
    ran, errors = [], []

    def fit():
        try:
            model.fit(x, y, epochs=1, batch_size=64, verbose=0, shuffle=False)
            ran.append(1)
        except RuntimeError as e:
            errors.append(str(e))

    for _ in range(10):
        threads = [threading.Thread(target=fit) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert ran, "no fit ran"
    for message in errors:
        assert "is busy" in message and model.name in message, message
    for _ in ran:
        reference.fit(x, y, epochs=1, batch_size=64, verbose=0, shuffle=False)
    for a, b in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_a_second_thread_is_refused_while_a_fit_runs_and_the_same_thread_may_reenter(blobs):
    x, y = blobs
    model = make_mlp()
    compile_mlp(model)
    seen = {}

    class Intrude(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch:
                return
            seen["reentrant"] = self.model.predict(x[:4], verbose=0).shape  # same thread: allowed

            def other():
                for call in (lambda: model.evaluate(x, y, verbose=0), lambda: model.predict(x, verbose=0),
                             lambda: model.fit(x, y, verbose=0), lambda: model.train_on_batch(x[:8], y[:8])):
                    try:
                        call()
                        seen.setdefault("ran", 0)
                        seen["ran"] += 1
                    except RuntimeError as e:
                        seen.setdefault("refused", []).append(str(e))

            t = threading.Thread(target=other)
            t.start()
            t.join()

    model.fit(x, y, epochs=1, batch_size=64, verbose=0, callbacks=[Intrude()])
    assert seen["reentrant"] == (4, 3)
    assert "ran" not in seen
    assert len(seen["refused"]) == 4 and all("is busy" in m for m in seen["refused"])
    model.evaluate(x, y, verbose=0)  # free again afterwards


def test_two_models_on_two_threads_are_independent(blobs):
    x, y = blobs
    models = [make_mlp(seed=s) for s in (1, 2)]
    for m in models:
        compile_mlp(m)
    results = {}

    def fit(i):
        results[i] = models[i].fit(x, y, epochs=2, batch_size=32, verbose=0).history["loss"][-1]

    threads = [threading.Thread(target=fit, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(results) == {0, 1} and all(np.isfinite(v) for v in results.values())


# ---- labels are validated before any narrowing cast ------------------------------------------
@pytest.mark.parametrize("dtype,value", [(np.int64, 2**32 + 1), (np.uint64, 2**32 + 1), (np.uint32, 2**31 + 1)])
def test_integer_labels_beyond_int32_are_refused_not_wrapped(blobs, dtype, value):
    x, y = blobs
    model = make_mlp()
    compile_mlp(model)
    bad = y.astype(dtype)
    bad[5] = value  # 2**32 + 1 wrapped to int32 is the valid class 1
    for run in (lambda: model.fit(x, bad, epochs=1, verbose=0),
                lambda: model.evaluate(x, bad, verbose=0),
                lambda: model.train_on_batch(x[:8], bad[:8]),
                lambda: model.fit(tf.data.Dataset.from_tensor_slices((x, bad)).batch(32), epochs=1, verbose=0)):
        with pytest.raises(ValueError, match=rf"{value} at index 5 does not fit in int32"):
            run()


def test_python_int_labels_beyond_int32_stay_int64_in_a_dataset():
    ds = tf.data.Dataset.from_tensor_slices(([[0.0]] * 2, [2**40, 1]))
    labels = [int(np.asarray(e[1])) for e in ds]
    assert labels == [2**40, 1]


def test_losses_refuse_labels_beyond_int32():
    loss = tf.keras.losses.SparseCategoricalCrossentropy()
    with pytest.raises(ValueError, match="does not fit in int32"):
        loss(np.array([2**32 + 1], dtype=np.int64), np.full((1, 3), 1 / 3, dtype=np.float32))


# ---- arguments are checked, and honoured ----------------------------------------------------
def test_misspelled_keywords_are_type_errors(blobs):
    x, y = blobs
    model = make_mlp()
    compile_mlp(model)
    with pytest.raises(TypeError, match="verbse"):
        model.evaluate(x, y, verbse=0)
    with pytest.raises(TypeError, match="verbse"):
        model.predict(x, verbse=0)


def test_evaluate_and_predict_honour_steps(blobs):
    x, y = blobs
    model = make_mlp()
    compile_mlp(model)
    model.fit(x, y, epochs=1, verbose=0)
    first_two = model.evaluate(x[:64], y[:64], batch_size=32, verbose=0)
    assert model.evaluate(x, y, batch_size=32, steps=2, verbose=0) == pytest.approx(first_two, rel=1e-6)
    assert model.predict(x, batch_size=32, steps=3, verbose=0).shape == (96, 3)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()  # infinite: steps bounds it
    assert model.evaluate(ds, steps=2, verbose=0) == pytest.approx(first_two, rel=1e-6)
    assert model.predict(ds, steps=2, verbose=0).shape == (64, 3)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="steps must be a positive integer"):
            model.evaluate(x, y, steps=bad, verbose=0)
        with pytest.raises(ValueError, match="steps must be a positive integer"):
            model.predict(x, steps=bad)


def test_predict_calls_its_callbacks(blobs):
    x, _ = blobs
    model = make_mlp()
    compile_mlp(model)
    events = []

    class Record(tf.keras.callbacks.Callback):
        def on_predict_begin(self, logs=None):
            events.append("begin")

        def on_predict_batch_end(self, batch, logs=None):
            events.append((batch, logs["outputs"].shape))

        def on_predict_end(self, logs=None):
            events.append("end")

    out = model.predict(x[:100], batch_size=40, callbacks=[Record()])
    assert events == ["begin", (0, (40, 3)), (1, (40, 3)), (2, (20, 3)), "end"]
    np.testing.assert_array_equal(out, model.predict(x[:100], batch_size=40))


def test_metrics_given_as_a_string_is_a_clear_error():
    model = make_mlp()
    with pytest.raises(ValueError, match=r"metrics must be a list.*metrics=\['accuracy'\]"):
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics="accuracy")


@pytest.mark.parametrize("value", [2**63, 2**70])
def test_huge_batch_sizes_are_named_not_a_signature_dump(blobs, value):
    x, y = blobs
    model = make_mlp()
    compile_mlp(model)
    with pytest.raises(ValueError, match=r"fit: batch_size must be at most 2\*\*63 - 1"):
        model.fit(x, y, batch_size=value, verbose=0)


def test_the_largest_batch_size_trains_in_one_step(blobs):
    x, y = blobs
    model = make_mlp()
    compile_mlp(model)
    history = model.fit(x, y, batch_size=2**63 - 1, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_an_optimizer_of_another_strategy_is_refused(logical_cpus):
    logical_cpus(2)
    mirrored = tf.distribute.MirroredStrategy()
    with mirrored.scope():
        optimizer = tf.keras.optimizers.Adam()
    other = tf.distribute.OneDeviceStrategy("/cpu:0")
    with other.scope():
        model = make_mlp()
        with pytest.raises(ValueError, match="optimizer .* was created in the scope of .*MirroredStrategy"):
            model.compile(optimizer=optimizer, loss="mse")


# ---- BackupAndRestore ------------------------------------------------------------------------
def _backup_run(tmp_path, x, y, epochs, stop_at=None, batch_size=32, seed=5):
    model = make_mlp(seed=seed)
    compile_mlp(model)
    callbacks = [tf.keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq=3)]

    class Stop(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if stop_at is not None and (self._epoch, batch) == stop_at:
                raise KeyboardInterrupt

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch = epoch

    with pytest.raises(KeyboardInterrupt) if stop_at else _nothing():
        model.fit(x, y, epochs=epochs, batch_size=batch_size, verbose=0, callbacks=callbacks + [Stop()])
    return model


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_backup_restores_into_a_model_built_again_in_the_same_process(tmp_path, blobs):
    """The notebook pattern: a run is interrupted, the model cell is run again (new automatic
    layer names), and fit resumes from the backup with the uninterrupted run's weights."""
    x, y = blobs
    uninterrupted = _backup_run(tmp_path / "a", x, y, epochs=2)
    _backup_run(tmp_path / "b", x, y, epochs=2, stop_at=(1, 7))  # killed in epoch 2
    resumed = _backup_run(tmp_path / "b", x, y, epochs=2)          # rebuilt: new layer names
    for a, b in zip(uninterrupted.get_weights(), resumed.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_a_backup_that_does_not_fit_leaves_the_model_untouched_and_names_the_file(tmp_path, blobs):
    x, y = blobs
    _backup_run(tmp_path, x, y, epochs=2, stop_at=(0, 10))
    model = make_mlp(seed=9)
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = model.get_weights()
    backup = tf.keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    with pytest.raises(ValueError, match=r"backup.*latest\.mdtrain.*Adam optimizer.*SGD"):
        model.fit(x, y, epochs=2, verbose=0, callbacks=[backup])
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_resuming_mid_epoch_with_another_batch_size_is_a_clear_error(tmp_path, blobs):
    x, y = blobs
    _backup_run(tmp_path, x, y, epochs=2, stop_at=(0, 10), batch_size=32)
    with pytest.raises(ValueError, match=r"step 9 of epoch 1 of a run with batch_size=32 and 19 steps per epoch; "
                                         r"this fit has batch_size=64 and 10 steps"):
        _backup_run(tmp_path, x, y, epochs=2, batch_size=64)


def test_resuming_at_an_epoch_boundary_with_another_batch_size_works(tmp_path, blobs):
    x, y = blobs
    model = make_mlp(seed=5)
    compile_mlp(model)
    backup_dir = str(tmp_path / "backup")
    stop = tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, epochs=3, batch_size=32, verbose=0,
                  callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir), stop])
    model = make_mlp(seed=5)
    compile_mlp(model)
    history = model.fit(x, y, epochs=3, batch_size=64, verbose=0,
                        callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir)])
    assert len(history.history["loss"]) == 2  # epochs 2 and 3
    assert not os.path.exists(backup_dir + "/latest.mdtrain")


# ---- readers never block on what is not a regular file -------------------------------------
READ_PIPE = r"""
import sys
import mdtrain as tf
from mdtrain.keras.datasets import _idx
reader = {"load_model": lambda p: tf.keras.models.load_model(p), "idx": lambda p: _idx.read_idx(p, 1)}[sys.argv[1]]
try:
    reader(sys.argv[2])
except Exception as e:
    print(f"{type(e).__name__}: {e}")
"""


@pytest.mark.parametrize("reader", ["load_model", "idx"])
def test_readers_refuse_a_named_pipe_instead_of_blocking(tmp_path, reader):
    """Opening a FIFO for reading blocks until a writer comes: the readers must check the file
    type first. In a child process, so that a regression fails the test instead of hanging it."""
    import subprocess
    import sys

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-c", READ_PIPE, reader, str(fifo)], capture_output=True, text=True,
                          timeout=60)
    out = proc.stdout.strip()
    assert str(fifo) in out and ("pipe" in out.split(str(fifo))[-1] or "FIFO" in out or "regular" in out), \
        out + proc.stderr
    assert out.startswith(("ValueError", "OSError", "FileNotFoundError")), out


@pytest.mark.parametrize("name", ["units_1e8", "units_2p40"])
def test_a_small_model_file_claiming_huge_layers_is_refused_naming_it(name):
    """Layer configs are built before the file's weights are compared: a 4 KB file claiming
    Dense(10**8) or Dense(2**40) is refused at once as corrupt (not gigabytes allocated first, not
    a MemoryError without the file name). Reproducers from the model_load fuzzer's findings."""
    import resource

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "known", "model_load", name)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ValueError, match=rf"{name}' is corrupt: its layer configs describe weights far larger"):
        tf.keras.models.load_model(path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 * 1024  # KiB: under 256 MiB
