"""keras.callbacks.TensorBoard: the event files, read back by the tensorboard package's reader."""
import os

import numpy as np
import pytest

import mdtrain as tf
from conftest import compile_mlp, make_mlp

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                        reason="the tensorboard package (test extra) reads the event files")


def read(log_dir):
    acc = event_accumulator.EventAccumulator(str(log_dir), size_guidance={event_accumulator.SCALARS: 0,
                                                                           event_accumulator.HISTOGRAMS: 0})
    acc.Reload()
    return acc


def scalars(acc, tag):
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_epoch_scalars_histograms_and_step_time(tmp_path, blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    history = model.fit(x, y, batch_size=100, epochs=3, validation_split=0.2, verbose=0,
                        callbacks=[tf.keras.callbacks.TensorBoard(tmp_path, histogram_freq=1)])
    train = read(tmp_path / "train")
    tags = train.Tags()
    loss = scalars(train, "epoch_loss")
    assert [s for s, _ in loss] == [0, 1, 2]
    np.testing.assert_allclose([v for _, v in loss], history.history["loss"], rtol=1e-6)
    np.testing.assert_allclose([v for _, v in scalars(train, "epoch_accuracy")], history.history["accuracy"],
                               rtol=1e-6)
    np.testing.assert_allclose([v for _, v in scalars(train, "epoch_learning_rate")], [0.01] * 3, rtol=1e-6)
    for part in ("step", "compute", "communication", "update", "idle"):
        values = [v for _, v in scalars(train, f"epoch_step_time/{part}")]
        assert len(values) == 3 and all(v >= 0 for v in values)
    names = [n for layer in model.layers for n in layer._core.weight_names()]  # "<layer>/kernel", ...
    assert set(tags["histograms"]) == set(names)
    kernel_tag = f"{model.layers[0].name}/kernel"
    hist = train.Histograms(kernel_tag)
    assert [h.step for h in hist] == [0, 1, 2]
    last_kernel = model.layers[0].get_weights()[0]
    assert hist[-1].histogram_value.num == last_kernel.size
    assert hist[-1].histogram_value.min == pytest.approx(float(last_kernel.min()))
    assert hist[-1].histogram_value.max == pytest.approx(float(last_kernel.max()))
    validation = read(tmp_path / "validation")
    np.testing.assert_allclose([v for _, v in scalars(validation, "epoch_loss")], history.history["val_loss"],
                               rtol=1e-6)


def test_batch_scalars_every_update_freq_steps(tmp_path, blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    model.fit(x, y, batch_size=100, epochs=2, verbose=0,
              callbacks=[tf.keras.callbacks.TensorBoard(tmp_path, update_freq=2)])
    steps = [s for s, _ in scalars(read(tmp_path / "train"), "batch_loss")]
    assert steps == [2, 4, 6, 8, 10, 12]  # 6 steps per epoch, global step numbering


def test_learning_rate_from_a_scheduler_is_logged(tmp_path, blobs):
    x, y = blobs
    model = compile_mlp(make_mlp())
    model.fit(x, y, batch_size=200, epochs=3, verbose=0,
              callbacks=[tf.keras.callbacks.LearningRateScheduler(lambda epoch: 0.1 / (epoch + 1)),
                         tf.keras.callbacks.TensorBoard(tmp_path)])
    np.testing.assert_allclose([v for _, v in scalars(read(tmp_path / "train"), "epoch_learning_rate")],
                               [0.1, 0.05, 0.1 / 3], rtol=1e-6)


def test_steps_per_second_when_asked(tmp_path, blobs):
    x, y = blobs
    compile_mlp(make_mlp()).fit(x, y, batch_size=100, epochs=2, verbose=0, callbacks=[
        tf.keras.callbacks.TensorBoard(tmp_path, write_steps_per_second=True)])
    train = read(tmp_path / "train")
    rates = [v for _, v in scalars(train, "epoch_steps_per_second")]
    steps = [v for _, v in scalars(train, "epoch_step_time/step")]
    assert len(rates) == 2 and rates == pytest.approx([1 / s for s in steps], rel=1e-6)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="update_freq"):
        tf.keras.callbacks.TensorBoard("logs", update_freq="sometimes")
    with pytest.raises(ValueError, match="histogram_freq"):
        tf.keras.callbacks.TensorBoard("logs", histogram_freq=-1)


def test_graph_and_profile_requests_warn_and_write_nothing_extra(tmp_path, blobs):
    with pytest.warns(UserWarning, match="write_graph"):
        cb = tf.keras.callbacks.TensorBoard(tmp_path, write_graph=True, profile_batch=2)
    x, y = blobs
    compile_mlp(make_mlp()).fit(x, y, batch_size=200, epochs=1, verbose=0, callbacks=[cb])
    assert sorted(os.listdir(tmp_path)) == ["train"]


def test_only_the_chief_writes_under_multi_worker(tmp_path):
    import shutil
    import subprocess
    import sys

    if shutil.which("mpirun") is None or not tf._core.mpi_available():
        pytest.skip("needs mpirun and an mdtrain built with MPI")
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "tensorboard_job.py")
    proc = subprocess.run([sys.executable, "-m", "mdtrain.launch", "-n", "2", job, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.listdir(tmp_path) == ["worker0"]  # worker 1 wrote nothing
    assert [s for s, _ in scalars(read(tmp_path / "worker0" / "train"), "epoch_loss")] == [0, 1]
