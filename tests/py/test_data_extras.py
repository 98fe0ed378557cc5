"""tf.data pieces TF's tutorials use: cache, enumerate, from_generator, options, element_spec, and
the top-level aliases tf.losses / tf.metrics / tf.optimizers / tf.TensorSpec."""
import numpy as np
import pytest

import mdtrain as tf


def test_cache_replays_the_first_complete_iteration_and_freezes_a_shuffle():
    x = np.arange(20, dtype=np.float32)
    shuffled = tf.data.Dataset.from_tensor_slices(x).shuffle(20, seed=3)
    cached = shuffled.cache().batch(4)
    first = [b.tolist() for b in cached]
    second = [b.tolist() for b in cached]
    assert first == second and sorted(sum(first, [])) == x.tolist()
    assert [b.tolist() for b in shuffled.batch(4)] != first  # uncached: reshuffled each iteration
    # An iteration stopped early keeps nothing: the next one runs the pipeline again.
    calls = []
    counted = tf.data.Dataset.range(5).map(lambda v: calls.append(int(v)) or v).cache()
    next(iter(counted))
    assert list(counted) == [0, 1, 2, 3, 4] and calls == [0, 0, 1, 2, 3, 4]
    assert list(counted) == [0, 1, 2, 3, 4] and len(calls) == 6  # replayed, the map not run again
    assert counted.cardinality() == 5
    with pytest.raises(NotImplementedError, match="on-disk caches"):
        tf.data.Dataset.range(3).cache("/tmp/somewhere")


def test_cached_batches_still_train_through_fit():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).cache().shuffle(64, seed=1).batch(16)
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(4,))])
    model.compile(optimizer="adam", loss=tf.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[tf.metrics.SparseCategoricalAccuracy()])
    history = model.fit(ds, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2


def test_enumerate():
    ds = tf.data.Dataset.from_tensor_slices(np.array([10, 20, 30])).enumerate(start=5)
    assert [(int(i), int(v)) for i, v in ds] == [(5, 10), (6, 20), (7, 30)]
    index_spec, value_spec = ds.element_spec
    assert index_spec == tf.TensorSpec((), np.int64) and value_spec.shape == ()


def test_from_generator_with_a_signature():
    def gen(n):
        for i in range(n):
            yield np.full((2,), i, dtype=np.float64), i

    signature = (tf.TensorSpec(shape=(2,), dtype=np.float32), tf.TensorSpec(shape=(), dtype=np.int32))
    ds = tf.data.Dataset.from_generator(gen, args=(3,), output_signature=signature)
    assert ds.element_spec == signature
    assert ds.cardinality() == tf.data.UNKNOWN_CARDINALITY
    for _ in range(2):  # each iteration calls the generator again
        items = list(ds)
        assert [int(label) for _, label in items] == [0, 1, 2]
        assert items[1][0].dtype == np.float32 and items[1][0].tolist() == [1.0, 1.0]
    batches = list(ds.batch(2))
    assert batches[0][0].shape == (2, 2) and batches[1][1].tolist() == [2]
    old_style = tf.data.Dataset.from_generator(lambda: iter([(1, 2.0)]), output_types=(np.int64, np.float32),
                                               output_shapes=((), ()))
    assert old_style.element_spec == (tf.TensorSpec((), np.int64), tf.TensorSpec((), np.float32))
    bad = tf.data.Dataset.from_generator(lambda: iter([np.zeros(3)]), output_signature=tf.TensorSpec((2,)))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        list(bad)
    with pytest.raises(TypeError, match="output_signature"):
        tf.data.Dataset.from_generator(lambda: iter([]))


def test_options_are_recorded_merged_and_checked():
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.deterministic = True
    ds = tf.data.Dataset.range(4).with_options(options)
    more = tf.data.Options()
    more.threading.private_threadpool_size = 2
    merged = ds.with_options(more).options()
    assert merged.experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.DATA
    assert merged.deterministic is True and merged.threading.private_threadpool_size == 2
    assert list(ds.batch(2).map(lambda b: b * 2)) and ds.batch(2).options().deterministic is True
    with pytest.raises(AttributeError, match="no option 'auto_shard'"):
        options.experimental_distribute.auto_shard = 1
    with pytest.raises(TypeError, match="tf.data.Options"):
        ds.with_options({"deterministic": True})


def test_element_spec_of_slices_and_batches():
    x = np.zeros((10, 3), np.float32)
    y = np.zeros(10, np.int64)
    ds = tf.data.Dataset.from_tensor_slices({"x": x, "y": y})
    assert ds.element_spec == {"x": tf.TensorSpec((3,), np.float32), "y": tf.TensorSpec((), np.int64)}
    batched = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    assert batched.element_spec == (tf.TensorSpec((None, 3), np.float32), tf.TensorSpec((None,), np.int64))
    fixed = tf.data.Dataset.from_tensor_slices(x).batch(4, drop_remainder=True)
    assert fixed.element_spec == tf.TensorSpec((4, 3), np.float32)
    mapped = tf.data.Dataset.from_tensor_slices(x).map(lambda v: v[:2])
    assert mapped.element_spec == tf.TensorSpec((2,), np.float32)


def test_top_level_aliases():
    assert tf.losses.SparseCategoricalCrossentropy is tf.keras.losses.SparseCategoricalCrossentropy
    assert tf.metrics.SparseCategoricalAccuracy is tf.keras.metrics.SparseCategoricalAccuracy
    assert tf.optimizers.Adam is tf.keras.optimizers.Adam
