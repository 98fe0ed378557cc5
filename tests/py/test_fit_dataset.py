"""fit / evaluate / predict on mdtrain.data.Dataset pipelines."""
import numpy as np
import pytest

import mdtrain as tf
from conftest import compile_mlp, make_mlp


def _same_weights(a, b):
    return all(np.array_equal(p, q) for p, q in zip(a.get_weights(), b.get_weights()))


def test_dataset_fit_equals_array_fit(blobs):
    x, y = blobs
    arrays = compile_mlp(make_mlp(seed=3))
    arrays.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    pipeline = compile_mlp(make_mlp(seed=3))
    pipeline.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(32).prefetch(2), epochs=2, verbose=0)
    assert _same_weights(arrays, pipeline)


def test_mapped_pipeline_equals_plain_pipeline(blobs):
    """A map forces the batch-by-batch path; the result must not change."""
    x, y = blobs
    plain = compile_mlp(make_mlp(seed=4))
    h1 = plain.fit(tf.data.Dataset.from_tensor_slices((x * 2, y)).batch(50), epochs=2, verbose=0)
    mapped = compile_mlp(make_mlp(seed=4))
    h2 = mapped.fit(tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2, b)).batch(50), epochs=2,
                    verbose=0)
    assert _same_weights(plain, mapped)
    assert h1.history == h2.history


def test_shuffled_dataset_is_reproducible_and_epochs_differ(blobs):
    x, y = blobs
    weights = []
    for _ in range(2):
        model = compile_mlp(make_mlp(seed=5))
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).shuffle(600, seed=9).batch(32), epochs=2, verbose=0)
        weights.append(model.get_weights())
    assert all(np.array_equal(a, b) for a, b in zip(*weights))


def test_repeat_needs_steps_per_epoch_and_iteration_continues(blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    infinite = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        model.fit(infinite, epochs=1, verbose=0)
    history = model.fit(infinite, epochs=3, steps_per_epoch=4, verbose=0)
    assert len(history.epoch) == 3 and model.optimizer.iterations == 12


def test_evaluate_and_predict_on_datasets(blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    model.fit(x, y, epochs=1, verbose=0)
    assert model.evaluate(tf.data.Dataset.from_tensor_slices((x, y)).batch(70), verbose=0)[0] == pytest.approx(
        model.evaluate(x, y, verbose=0)[0], rel=1e-6)
    assert np.allclose(model.predict(tf.data.Dataset.from_tensor_slices(x).batch(64)), model.predict(x))
    history = model.fit(x, y, epochs=1, verbose=0, validation_data=tf.data.Dataset.from_tensor_slices((x, y)).batch(99))
    assert "val_loss" in history.history


def test_dataset_arguments_are_checked(blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    with pytest.raises(ValueError, match="y must not be given"):
        model.fit(ds, y, verbose=0)
    with pytest.raises(ValueError, match="validation_split"):
        model.fit(ds, validation_split=0.1, verbose=0)
    with pytest.raises(ValueError, match=r"\(x, y\)"):
        model.fit(tf.data.Dataset.from_tensor_slices(x).batch(32), verbose=0)


def test_distributed_dataset_under_mirrored(logical_cpus, blobs):
    x, y = blobs
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = compile_mlp(make_mlp(seed=6))
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(40)
    model.fit(strategy.experimental_distribute_dataset(ds), epochs=1, verbose=0)
    single = compile_mlp(make_mlp(seed=6))
    single.fit(ds, epochs=1, verbose=0)
    for a, b in zip(model.get_weights(), single.get_weights()):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
