"""keras.callbacks.BackupAndRestore: a job SIGKILLed mid-epoch and started again ends with the
weights of an uninterrupted run, bit for bit, and a backup restores under another strategy."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mdtrain as tf

JOB = os.path.join(os.path.dirname(__file__), "jobs", "backup_job.py")


def run_job(tmp_path, strategy, out, backup="backup", kill_after=0, devices=2, expect_killed=False):
    env = dict(os.environ, MDTRAIN_NUM_CPU_DEVICES=str(devices))
    cmd = [sys.executable, JOB, "--strategy", strategy, "--backup-dir", str(tmp_path / backup), "--out",
           str(tmp_path / out)]
    if kill_after:
        cmd += ["--kill-after-steps", str(kill_after)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if expect_killed:
        assert proc.returncode == -9, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
    return proc


def weights(path):
    with np.load(path) as f:
        names = sorted((k for k in f.files if k.startswith("arr_")), key=lambda k: int(k.split("_")[1]))
        return [f[k] for k in names]


def assert_bitwise_equal(a, b):
    assert len(a) == len(b)
    for wa, wb in zip(a, b):
        np.testing.assert_array_equal(wa, wb)


@pytest.mark.parametrize("strategy", ["one", "mirrored"])
def test_sigkill_mid_epoch_then_restart_gives_the_uninterrupted_weights(tmp_path, strategy):
    run_job(tmp_path, strategy, "straight.npz", backup="b1")
    # 13 steps per epoch: killed after 20 steps = epoch 2, step 7; the last backup was at step 18.
    run_job(tmp_path, strategy, "never.npz", backup="b2", kill_after=20, expect_killed=True)
    assert not (tmp_path / "never.npz").exists()
    assert (tmp_path / "b2" / "latest.mdtrain").exists()
    run_job(tmp_path, strategy, "resumed.npz", backup="b2")
    assert_bitwise_equal(weights(tmp_path / "resumed.npz"), weights(tmp_path / "straight.npz"))
    # A finished run removes its backup (delete_checkpoint=True), so the next fit starts afresh.
    assert not (tmp_path / "b2" / "latest.mdtrain").exists()


def test_backup_written_under_one_device_restores_under_mirrored(tmp_path):
    run_job(tmp_path, "one", "straight.npz", backup="b1")
    run_job(tmp_path, "one", "never.npz", backup="b2", kill_after=16, expect_killed=True)
    run_job(tmp_path, "mirrored", "resumed.npz", backup="b2")
    # The remaining steps ran on 2 replicas: the same math, gradients summed in another order.
    for a, b in zip(weights(tmp_path / "resumed.npz"), weights(tmp_path / "straight.npz")):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def small_model():
    model = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu", input_shape=(3,)),
                                 tf.keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_resume_continues_at_the_saved_epoch_and_step(tmp_path):
    tf.keras.utils.set_random_seed(3)
    x = np.random.default_rng(0).normal(size=(50, 3)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")

    class Stop(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 2 and self.model.history.epoch == [0]:
                raise KeyboardInterrupt  # what Ctrl-C does mid-epoch

    model = small_model()
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, batch_size=10, epochs=3, verbose=0,
                  callbacks=[tf.keras.callbacks.BackupAndRestore(tmp_path, save_freq=1), Stop()])
    seen = []

    class Record(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            seen.append(("epoch", epoch))

        def on_train_batch_begin(self, batch, logs=None):
            seen.append(("batch", batch))

    model = small_model()
    history = model.fit(x, y, batch_size=10, epochs=3, verbose=0,
                        callbacks=[tf.keras.callbacks.BackupAndRestore(tmp_path, save_freq=1), Record()])
    # Epoch 0 finished before the interruption; epoch 1 resumes after its third step.
    assert seen[:3] == [("epoch", 1), ("batch", 3), ("batch", 4)]
    assert history.epoch == [1, 2]
    assert model.optimizer.iterations == 15


def test_bad_arguments():
    with pytest.raises(ValueError, match="save_freq"):
        tf.keras.callbacks.BackupAndRestore("d", save_freq=0)
    with pytest.raises(ValueError, match="backup_dir"):
        tf.keras.callbacks.BackupAndRestore("")


def test_backup_of_another_architecture_is_refused(tmp_path):
    x = np.zeros((20, 3), "float32")
    y = np.zeros(20, "int64")

    class Stop(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        small_model().fit(x, y, epochs=2, verbose=0,
                          callbacks=[tf.keras.callbacks.BackupAndRestore(tmp_path, save_freq=1), Stop()])
    other = tf.keras.Sequential([tf.keras.layers.Dense(5, input_shape=(3,)), tf.keras.layers.Dense(2)])
    other.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="shapes"):
        other.fit(x, np.zeros((20, 2), "float32"), epochs=1, verbose=0,
                  callbacks=[tf.keras.callbacks.BackupAndRestore(tmp_path)])


@pytest.mark.parametrize("steps_per_epoch", [None, 7])  # 7 steps of 10 rows wrap around 50 rows
def test_interrupted_and_resumed_in_process_equals_straight(tmp_path, steps_per_epoch):
    x = np.random.default_rng(1).normal(size=(50, 3)).astype("float32")
    y = (x[:, 1] > 0).astype("int64")

    def train(callbacks):
        tf.keras.utils.set_random_seed(5)
        model = small_model()
        model.fit(x, y, batch_size=10, epochs=3, steps_per_epoch=steps_per_epoch, verbose=0, callbacks=callbacks)
        return model

    straight = train([]).get_weights()

    class Interrupt(tf.keras.callbacks.Callback):
        seen = 0

        def on_train_batch_end(self, batch, logs=None):
            Interrupt.seen += 1
            if Interrupt.seen == 9:  # epoch 1, step 4 (or 2)
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train([tf.keras.callbacks.BackupAndRestore(tmp_path, save_freq=1), Interrupt()])
    resumed = train([tf.keras.callbacks.BackupAndRestore(tmp_path, save_freq=1)]).get_weights()
    for a, b in zip(resumed, straight):
        np.testing.assert_array_equal(a, b)
