"""Custom training loops: strategy.run over the model's own train step, strategy.reduce."""
import numpy as np
import pytest

import mdtrain as tf
from conftest import make_mlp


def _global_batches(x, y, batch):
    return [(x[i:i + batch], y[i:i + batch]) for i in range(0, len(x), batch)]


def test_custom_loop_matches_fit(logical_cpus, blobs):
    """The TF tutorial's loop shape gives the same weights as fit on the same batches."""
    x, y = blobs
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        reference = make_mlp(seed=2)
        reference.compile(optimizer=tf.keras.optimizers.SGD(0.05),
                          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    reference.fit(x, y, batch_size=50, epochs=1, shuffle=False, verbose=0)

    with strategy.scope():
        model = make_mlp(seed=2)
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    def train_step(inputs):
        return model.train_step(inputs)

    def distributed_train_step(dataset_inputs):
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    losses = []
    for batch in strategy.experimental_distribute_dataset(_global_batches(x, y, 50)):
        losses.append(distributed_train_step(batch))
    assert len(losses) == 12
    for a, b in zip(reference.get_weights(), model.get_weights()):
        assert np.array_equal(a, b)
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_per_replica_losses_sum_to_the_global_mean(logical_cpus, blobs):
    x, y = blobs
    logical_cpus(3)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = make_mlp(seed=1)
        model.compile(optimizer=tf.keras.optimizers.SGD(0.0),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    batch = next(iter(strategy.experimental_distribute_dataset([(x[:10], y[:10])])))
    assert [len(v) for v in batch[0].values] == [4, 3, 3]
    per_replica = strategy.run(lambda inputs: model.train_step(inputs), args=(batch,))
    assert isinstance(per_replica, tf.distribute.PerReplica) and len(per_replica.values) == 3
    logits = model.predict(x[:10]).astype(np.float64)
    z = logits - logits.max(axis=1, keepdims=True)
    per_example = np.log(np.exp(z).sum(axis=1)) - z[np.arange(10), y[:10]]
    expected = [per_example[:4].sum() / 10, per_example[4:7].sum() / 10, per_example[7:].sum() / 10]
    assert np.allclose(per_replica.values, expected, rtol=1e-5)
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    assert total == pytest.approx(per_example.mean(), rel=1e-5)
    mean = strategy.reduce("mean", per_replica, axis=None)
    assert mean == pytest.approx(per_example.mean() / 3, rel=1e-5)


def test_run_passes_replica_context_and_plain_values(logical_cpus):
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    ids = strategy.run(lambda k: (tf.distribute.get_replica_context().replica_id_in_sync_group, k), args=(7,))
    assert ids.values == ((0, 7), (1, 7))
    assert tf.distribute.get_replica_context() is None
    assert strategy.reduce(tf.distribute.ReduceOp.SUM, tf.distribute.PerReplica([np.ones(3), np.ones(3)]),
                           axis=0) == pytest.approx(6.0)


def test_train_step_on_some_replicas_only_is_an_error(logical_cpus, blobs):
    x, y = blobs
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = make_mlp()
        model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    def step(inputs):
        if tf.distribute.get_replica_context().replica_id_in_sync_group == 0:
            return model.train_step(inputs)
        return 0.0

    batch = next(iter(strategy.experimental_distribute_dataset([(x[:8], y[:8])])))
    with pytest.raises(RuntimeError, match="every replica"):
        strategy.run(step, args=(batch,))


def test_run_results_unpack_like_tf_and_numpy_results_are_tensors(logical_cpus):
    # TF's run returns the structure of per-replica values: `index, outputs = strategy.run(...)`.
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    dist = strategy.experimental_distribute_dataset(tf.data.Dataset.range(6).enumerate().batch(6))
    index, values = next(iter(dist))
    out_index, outputs = strategy.run(lambda i, v: (i, 2 * v), args=(index, values))
    local = strategy.experimental_local_results(outputs)
    assert all(isinstance(v, tf.Tensor) for v in local)
    assert [v.numpy().tolist() for v in local] == [[0, 2, 4], [6, 8, 10]]
    assert [v.numpy().tolist() for v in strategy.experimental_local_results(out_index)] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(TypeError, match="no tuple"):
        iter(strategy.run(lambda: 1.0))
