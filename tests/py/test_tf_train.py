"""tf.train.Checkpoint / CheckpointManager / latest_checkpoint, tf.io.gfile, and the learning
rate as a variable."""
import os

import numpy as np
import pytest

import mdtrain as tf
from conftest import compile_mlp, make_mlp


def trained(blobs, epochs=1):
    x, y = blobs
    model = compile_mlp(make_mlp())
    model.fit(x, y, batch_size=100, epochs=epochs, verbose=0)
    return model


def test_checkpoint_save_restore_continues_training_identically(tmp_path, blobs):
    x, y = blobs
    model = trained(blobs)
    ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    path = ckpt.save(os.path.join(tmp_path, "ckpt"))
    assert path == os.path.join(tmp_path, "ckpt-1.weights.h5") and os.path.exists(path)
    assert tf.train.latest_checkpoint(tmp_path) == path
    expected_before = model.get_weights()
    model.fit(x, y, batch_size=100, epochs=1, verbose=0, shuffle=False)
    expected_after = model.get_weights()

    other = trained(blobs)
    other.fit(x, y, batch_size=100, epochs=1, verbose=0)  # different weights and optimizer state
    tf.train.Checkpoint(model=other, optimizer=other.optimizer).restore(tf.train.latest_checkpoint(tmp_path))
    for a, b in zip(other.get_weights(), expected_before):
        np.testing.assert_array_equal(a, b)
    other.fit(x, y, batch_size=100, epochs=1, verbose=0, shuffle=False)
    for a, b in zip(other.get_weights(), expected_after):
        np.testing.assert_array_equal(a, b)


def test_checkpoint_file_is_a_keras_weights_file(tmp_path, blobs):
    model = trained(blobs)
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(os.path.join(tmp_path, "c"))
    fresh = trained(blobs)
    fresh.load_weights(path)
    for a, b in zip(fresh.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_checkpoint_holds_scalar_variables(tmp_path, blobs):
    model = trained(blobs)
    model.optimizer.learning_rate = 0.005
    path = tf.train.Checkpoint(model=model, lr=model.optimizer.learning_rate).write(os.path.join(tmp_path, "c"))
    model.optimizer.learning_rate = 0.5
    tf.train.Checkpoint(model=model, lr=model.optimizer.learning_rate).read(path)
    assert model.optimizer.learning_rate.numpy() == np.float32(0.005)


def test_checkpoint_manager_keeps_the_newest(tmp_path, blobs):
    x, y = blobs
    model = trained(blobs)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=model.optimizer), tmp_path,
                                         max_to_keep=2)
    assert manager.latest_checkpoint is None and manager.restore_or_initialize() is None
    paths = [manager.save() for _ in range(4)]
    assert manager.checkpoints == paths[-2:]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-3.weights.h5", "ckpt-4.weights.h5"]
    assert tf.train.latest_checkpoint(tmp_path) == paths[-1] == manager.latest_checkpoint
    # A new manager over the same directory sees them.
    again = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=2)
    assert again.checkpoints == paths[-2:]
    with pytest.raises(ValueError, match="max_to_keep"):
        tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path, max_to_keep=0)


def test_checkpoint_refuses_what_it_cannot_hold(blobs):
    model = trained(blobs)
    with pytest.raises(TypeError, match="cannot be checkpointed"):
        tf.train.Checkpoint(model=model, data=[1, 2])
    with pytest.raises(ValueError, match="optimizer of the checkpointed model"):
        tf.train.Checkpoint(model=model, optimizer=tf.keras.optimizers.Adam())


def test_restore_of_missing_or_damaged_checkpoint_is_a_clear_error(tmp_path, blobs):
    model = trained(blobs)
    ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    with pytest.raises(FileNotFoundError, match="nothing-1"):
        ckpt.restore(os.path.join(tmp_path, "nothing-1"))
    path = ckpt.save(os.path.join(tmp_path, "ckpt"))
    with open(path, "r+b") as f:
        f.truncate(200)
    with pytest.raises(ValueError, match="ckpt-1.weights.h5"):
        ckpt.restore(path)


def test_failed_checkpoint_write_keeps_the_previous_file(tmp_path, blobs, monkeypatch):
    from mdtrain.keras import _keras_weights

    model = trained(blobs)
    ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    path = ckpt.write(os.path.join(tmp_path, "c"))
    before = open(path, "rb").read()

    def fail(*args, **kwargs):
        raise OSError("simulated failure")

    monkeypatch.setattr(_keras_weights, "write", fail)
    with pytest.raises(OSError, match="simulated"):
        ckpt.write(os.path.join(tmp_path, "c"))
    assert open(path, "rb").read() == before and os.listdir(tmp_path) == ["c.weights.h5"]


def test_latest_checkpoint_without_state_file_is_the_newest_weights_file(tmp_path):
    assert tf.train.latest_checkpoint(tmp_path) is None
    assert tf.train.latest_checkpoint(tmp_path / "absent") is None
    for n in (1, 2, 10):
        (tmp_path / f"ckpt_{n}.weights.h5").write_bytes(b"x")
        os.utime(tmp_path / f"ckpt_{n}.weights.h5", ns=(10**18, 10**18))  # equal times: the number decides
    assert tf.train.latest_checkpoint(tmp_path) == str(tmp_path / "ckpt_10.weights.h5")


def test_gfile_over_the_local_file_system(tmp_path):
    gfile = tf.io.gfile
    d = str(tmp_path / "a" / "b")
    gfile.makedirs(d)
    gfile.makedirs(d)  # exists already: fine, as in TF
    with gfile.GFile(os.path.join(d, "x.txt"), "w") as f:
        f.write("hello")
    assert gfile.exists(os.path.join(d, "x.txt")) and gfile.isdir(d)
    assert gfile.glob(str(tmp_path / "a" / "*" / "*.txt")) == [os.path.join(d, "x.txt")]
    with gfile.GFile(os.path.join(d, "x.txt")) as f:
        assert f.read() == "hello"
    gfile.rmtree(str(tmp_path / "a"))
    assert not gfile.exists(d)
    with pytest.raises(ValueError, match="only local paths"):
        gfile.exists("gs://bucket/x")


def test_learning_rate_is_a_variable(blobs):
    model = trained(blobs)
    lr = model.optimizer.learning_rate
    assert lr.numpy() == np.float32(0.01) and isinstance(lr.numpy(), np.float32)
    assert float(lr) == pytest.approx(0.01) and float(model.optimizer.lr) == pytest.approx(0.01)
    assert np.asarray(lr).shape == () and lr * 2 == pytest.approx(0.02) and 1 - lr == pytest.approx(0.99)
    assert f"{lr:.3f}" == "0.010"
    lr.assign(0.02)
    assert model.optimizer.learning_rate.numpy() == np.float32(0.02)
    tf.keras.backend.set_value(model.optimizer.learning_rate, 0.03)
    assert tf.keras.backend.get_value(model.optimizer.learning_rate) == np.float32(0.03)
    model.optimizer.learning_rate = model.optimizer.learning_rate * 0.5
    assert model.optimizer.learning_rate.numpy() == np.float32(0.015)
    with pytest.raises(TypeError, match="learning_rate"):
        model.optimizer.learning_rate = "fast"


def test_learning_rate_set_to_zero_stops_training(blobs):
    x, y = blobs
    model = trained(blobs)
    model.optimizer.learning_rate.assign(0.0)
    model.optimizer.learning_rate = 0.0
    before = model.get_weights()
    model.fit(x, y, batch_size=100, epochs=1, verbose=0)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_schedule_learning_rate_reads_the_current_value(blobs):
    x, y = blobs
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=6, decay_rate=0.5)
    model = compile_mlp(make_mlp(), optimizer=tf.keras.optimizers.SGD(schedule))
    assert model.optimizer.learning_rate.numpy() == pytest.approx(0.1)
    model.fit(x, y, batch_size=100, epochs=1, verbose=0)  # 6 steps
    assert model.optimizer.learning_rate.numpy() == pytest.approx(0.05, rel=1e-6)


def _loop_model(seed):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([tf.keras.layers.Dense(6, activation="relu"), tf.keras.layers.Dense(3)])


def _loop_step(model, optimizer, x, y):
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


def test_checkpoint_of_a_custom_loop_restores_into_a_new_unbuilt_model(tmp_path):
    # TF's custom-training tutorial: Checkpoint(optimizer=..., model=...) of an uncompiled model
    # trained with apply_gradients, restored into a new model that is built afterwards.
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 5)).astype(np.float32), rng.integers(0, 3, size=16)
    model, optimizer = _loop_model(0), tf.keras.optimizers.Adam(0.01)
    for _ in range(3):
        _loop_step(model, optimizer, x, y)
    path = tf.train.Checkpoint(optimizer=optimizer, model=model).save(os.path.join(tmp_path, "ckpt"))
    _loop_step(model, optimizer, x, y)
    expected = model.get_weights()

    new_model, new_optimizer = _loop_model(1), tf.keras.optimizers.Adam(0.01)
    tf.train.Checkpoint(optimizer=new_optimizer, model=new_model).restore(tf.train.latest_checkpoint(tmp_path))
    assert path.endswith("ckpt-1.weights.h5") and not new_model.built
    new_model(x)  # built here: the deferred restore applies
    assert int(new_optimizer.iterations) == 3
    _loop_step(new_model, new_optimizer, x, y)  # Adam continues from the restored slots
    for a, b in zip(expected, new_model.get_weights()):
        assert np.array_equal(a, b)


def test_checkpoint_refuses_a_fresh_optimizer_beside_a_compiled_model(blobs):
    model = trained(blobs)
    with pytest.raises(ValueError, match="custom loop's optimizer"):
        tf.train.Checkpoint(model=model, optimizer=tf.keras.optimizers.SGD())
