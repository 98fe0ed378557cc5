"""Custom training loops (GradientTape + optimizer.apply_gradients) inside strategy.run under
MirroredStrategy on logical CPU devices, and under MultiWorkerMirroredStrategy (mdtrain.launch):
one update from the replicas' summed gradients, the weights fit gives; the distributed dataset
and value helpers of tf.distribute."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mdtrain as tf
from mdtrain.keras.datasets import DatasetNotFoundError

GLOBAL_BATCH = 64
EXAMPLES = 512  # 8 steps
JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs")


@pytest.fixture(scope="module")
def fashion():
    try:
        (x, y), _ = tf.keras.datasets.fashion_mnist.load_data()
    except DatasetNotFoundError as e:
        pytest.skip(f"Fashion-MNIST is not available: {e}")
    return x[:EXAMPLES].reshape(EXAMPLES, 784).astype(np.float32) / 255, y[:EXAMPLES].astype(np.int64)


def _seed_mlp():
    tf.keras.utils.set_random_seed(7)
    return tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu", input_shape=(784,)),
                                tf.keras.layers.Dense(10, activation="softmax")])


OPTIMIZERS = {"sgd": lambda: tf.keras.optimizers.SGD(0.1), "adam": lambda: tf.keras.optimizers.Adam(0.001)}


def _custom_loop(strategy, make_optimizer, x, y):
    """TF's custom-training tutorial, unchanged but for the import."""
    with strategy.scope():
        model = _seed_mlp()
        optimizer = make_optimizer()
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(reduction="none")

    def compute_loss(labels, predictions):
        per_example_loss = loss_object(labels, predictions)
        return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = compute_loss(labels, predictions)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    def distributed_train_step(dataset_inputs):
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    losses = [float(distributed_train_step(batch)) for batch in strategy.experimental_distribute_dataset(dataset)]
    assert int(optimizer.iterations) == EXAMPLES // GLOBAL_BATCH
    return model.get_weights(), losses


def _fit(strategy, make_optimizer, x, y):
    with strategy.scope():
        model = _seed_mlp()
        model.compile(optimizer=make_optimizer(), loss=tf.keras.losses.SparseCategoricalCrossentropy())
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    return model.get_weights(), history.history["loss"][0]


def _assert_close(actual, expected):
    assert len(actual) == len(expected)
    for a, b in zip(actual, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_tutorial_loop_on_two_replicas_matches_fit_and_one_replica(logical_cpus, fashion, optimizer):
    x, y = fashion
    make = OPTIMIZERS[optimizer]
    logical_cpus(2)
    two = tf.distribute.MirroredStrategy()
    assert two.num_replicas_in_sync == 2
    one = tf.distribute.MirroredStrategy(["/cpu:0"])
    loop2, losses2 = _custom_loop(two, make, x, y)
    loop1, losses1 = _custom_loop(one, make, x, y)
    fit2, _ = _fit(two, make, x, y)
    fit1, fit_loss1 = _fit(one, make, x, y)
    initial = _seed_mlp()
    initial.build((None, 784))
    assert not np.allclose(loop2[0], initial.get_weights()[0], atol=1e-4)  # the loop trained
    _assert_close(loop1, fit1)
    _assert_close(loop2, fit2)
    _assert_close(loop2, loop1)
    _assert_close(loop2, fit1)
    # The summed per-replica losses are the global batch's mean loss.
    np.testing.assert_allclose(losses2, losses1, rtol=1e-5)
    np.testing.assert_allclose(np.mean(losses1), fit_loss1, rtol=1e-5)
    assert losses2[-1] < losses2[0]


def test_replicas_sum_gradients_in_replica_order_once(logical_cpus):
    """Three replicas, one plain variable: the update is lr * (g0 + g1 + g2), applied once."""
    logical_cpus(3)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        v = tf.Variable([1.0, 2.0])
        optimizer = tf.keras.optimizers.SGD(0.5)
    scale = strategy.experimental_distribute_values_from_function(
        lambda ctx: np.float32(ctx.replica_id_in_sync_group + 1))
    seen = []

    def step(c):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * c)
        grad = tape.gradient(loss, v)
        seen.append(v.numpy())  # every replica computes on the weights before the step
        optimizer.apply_gradients([(grad, v)])
        return loss

    result = strategy.run(step, args=(scale,))
    assert [s.tolist() for s in seen] == [[1.0, 2.0]] * 3
    assert v.numpy().tolist() == [1.0 - 0.5 * 6, 2.0 - 0.5 * 6]
    assert int(optimizer.iterations) == 1
    assert [float(r) for r in strategy.experimental_local_results(result)] == [3.0, 6.0, 9.0]
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, result, axis=None)
    assert isinstance(total, tf.Tensor) and total.dtype == tf.float32 and float(total) == 18.0
    assert float(strategy.reduce(tf.distribute.ReduceOp.MEAN, result, axis=None)) == 6.0


def test_every_replica_must_apply_the_same_variables(logical_cpus):
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        a, b = tf.Variable(1.0), tf.Variable(2.0)
        optimizer = tf.keras.optimizers.SGD(0.1)

    def only_first(_):
        if tf.distribute.get_replica_context().replica_id_in_sync_group == 0:
            with tf.GradientTape() as tape:
                loss = a * a
            optimizer.apply_gradients([(tape.gradient(loss, a), a)])

    with pytest.raises(RuntimeError, match=r"called by replicas \[0\] but not by \[1\]"):
        strategy.run(only_first, args=(0,))
    assert float(a.numpy()) == 1.0  # nothing applied

    def twice(_):
        optimizer.apply_gradients([(tf.constant(1.0), a)])
        optimizer.apply_gradients([(tf.constant(1.0), a)])

    with pytest.raises(RuntimeError, match="twice"):
        strategy.run(twice, args=(0,))

    other = tf.keras.optimizers.SGD(0.1)

    def different(_):
        r = tf.distribute.get_replica_context().replica_id_in_sync_group
        other.apply_gradients([(tf.constant(1.0), a if r == 0 else b)])

    with pytest.raises(ValueError):
        strategy.run(different, args=(0,))


def test_reduce_tensors_along_an_axis(logical_cpus):
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    values = tf.distribute.PerReplica([tf.constant([1.0, 2.0, 3.0]), tf.constant([4.0])])
    assert float(strategy.reduce("SUM", values, axis=0)) == 10.0
    assert float(strategy.reduce(tf.distribute.ReduceOp.MEAN, values, axis=0)) == 2.5


def test_distribute_datasets_from_function(logical_cpus):
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    contexts = []

    def dataset_fn(input_context):
        contexts.append(input_context)
        batch = input_context.get_per_replica_batch_size(8)
        x = np.arange(20, dtype=np.float32).reshape(10, 2)
        return tf.data.Dataset.from_tensor_slices((x, np.arange(10))).batch(batch)

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    assert isinstance(contexts[0], tf.distribute.InputContext)
    assert (contexts[0].num_input_pipelines, contexts[0].input_pipeline_id,
            contexts[0].num_replicas_in_sync) == (1, 0, 2)
    spec = dist.element_spec
    assert spec[0].shape == (None, 2) and spec[1].shape == (None,)
    iterator = iter(dist)
    first = iterator.get_next()
    assert [v[:, 0].tolist() for v in first[0].values] == [[0, 2, 4, 6], [8, 10, 12, 14]]
    second = iterator.get_next_as_optional()
    assert bool(second.has_value())
    # 10 examples in per-replica batches of 4: the last step has 2 for replica 0, none for replica 1.
    assert [len(v) for v in second.get_value()[1].values] == [2, 0]
    empty = iterator.get_next_as_optional()
    assert not bool(empty.has_value())
    with pytest.raises(tf.errors.InvalidArgumentError):
        empty.get_value()
    with pytest.raises(tf.errors.OutOfRangeError):
        iterator.get_next()


def test_distributed_iterator_of_experimental_distribute_dataset(logical_cpus):
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    x = np.arange(10, dtype=np.float32)
    dist = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(x).batch(5))
    assert dist.element_spec.shape == (None,)
    iterator = iter(dist)
    assert [v.tolist() for v in iterator.get_next().values] == [[0, 1, 2], [3, 4]]
    assert [v.tolist() for v in next(iterator).values] == [[5, 6, 7], [8, 9]]
    assert not bool(iterator.get_next_as_optional().has_value())


needs_mpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or not tf._core.mpi_available(),
    reason="needs mpirun and an mdtrain built with MPI (apt-get install openmpi-bin libopenmpi-dev, reinstall)")


@needs_mpi
@pytest.mark.parametrize("optimizer,devices,input_mode", [("sgd", 1, "split"), ("adam", 2, "function")])
def test_multi_worker_tutorial_loop_matches_one_process(logical_cpus, fashion, tmp_path, optimizer, devices,
                                                        input_mode):
    """2 workers x `devices` replicas (mdtrain.launch) give the weights of one process with as many
    replicas, and of fit."""
    x, y = fashion
    out = tmp_path / "weights.npz"
    cmd = [sys.executable, "-m", "mdtrain.launch", "-n", "2", "--devices-per-worker", str(devices),
           os.path.join(JOBS, "custom_loop_job.py"), str(out), optimizer, input_mode]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with np.load(out) as f:
        weights = [f[f"arr_{i}"] for i in range(4)]
        losses = f["losses"]
    logical_cpus(2 * devices)
    strategy = tf.distribute.MirroredStrategy()
    assert strategy.num_replicas_in_sync == 2 * devices
    expected, expected_losses = _custom_loop(strategy, OPTIMIZERS[optimizer], x, y)
    _assert_close(weights, expected)
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-5)
    _assert_close(weights, _fit(tf.distribute.MirroredStrategy(["/cpu:0"]), OPTIMIZERS[optimizer], x, y)[0])


def test_replica_context_inside_run(logical_cpus):
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    seen = []

    def fn():
        context = tf.distribute.get_replica_context()
        seen.append((context.replica_id_in_sync_group, context.num_replicas_in_sync,
                     tf.distribute.in_cross_replica_context()))

    strategy.run(fn)
    assert seen == [(0, 2, False), (1, 2, False)]
    assert tf.distribute.in_cross_replica_context()
    with pytest.raises(RuntimeError, match="inside strategy.run"):
        strategy.run(lambda: strategy.run(fn))


def test_an_optimizer_compiled_under_replicas_is_refused_in_a_tape_step(logical_cpus, fashion):
    x, y = fashion
    logical_cpus(2)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = _seed_mlp()
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss=tf.keras.losses.SparseCategoricalCrossentropy())

    def step(inputs):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(inputs[0], training=True))
        model.optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                            model.trainable_variables))

    before = model.get_weights()
    batch = next(iter(strategy.experimental_distribute_dataset([(x[:8], y[:8])])))
    with pytest.raises(NotImplementedError, match="own optimizer state"):
        strategy.run(step, args=(batch,))
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)
