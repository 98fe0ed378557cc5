"""Strategies built the way TensorFlow's guides build them on a machine without GPUs, with TF's
behaviour (checked against TF in the Keras venv, skipped without it): MirroredStrategy over
GPUs this process does not have is made, and fails with TF's InvalidArgumentError when it runs;
MultiWorkerMirroredStrategy with NCCL options runs on CPUs as with AUTO."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mdtrain as tf
from keras_oracle import run_keras

GPUS = ["/gpu:0", "/gpu:1"]
NCCL = tf.distribute.experimental.CommunicationImplementation.NCCL

needs_no_gpu = pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU")), reason="this process has GPUs")
needs_mpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or not tf._core.mpi_available(),
    reason="needs mpirun and an mdtrain built with MPI (apt-get install openmpi-bin libopenmpi-dev, reinstall)")


def small_model():
    tf.keras.utils.set_random_seed(3)
    return tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3, activation="relu"),
                                tf.keras.layers.Dense(2)])


def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(32, 4)).astype(np.float32), rng.normal(size=(32, 2)).astype(np.float32)


@needs_no_gpu
def test_mirrored_over_absent_gpus_is_made_as_tf_makes_it(tmp_path):
    strategy = tf.distribute.MirroredStrategy(devices=GPUS)
    theirs = json.loads(run_keras("""
        import json, tensorflow as tf
        s = tf.distribute.MirroredStrategy(devices=["/gpu:0", "/gpu:1"])
        print(json.dumps({"replicas": s.num_replicas_in_sync, "devices": list(s.extended.worker_devices),
                          "gpus": len(tf.config.list_logical_devices("GPU"))}))
    """, tmp_path).strip().splitlines()[-1])
    if theirs["gpus"]:
        pytest.skip("the TensorFlow process sees GPUs")
    assert strategy.num_replicas_in_sync == theirs["replicas"] == 2
    assert list(strategy.extended.worker_devices) == theirs["devices"]
    with strategy.scope():  # entered as in TF; building layers needs no device
        assert tf.distribute.get_strategy() is strategy
        model = small_model()


@needs_no_gpu
def test_mirrored_over_absent_gpus_fails_with_tf_error_kind_when_it_runs():
    strategy = tf.distribute.MirroredStrategy(devices=GPUS)
    x, y = data()
    expected = r"Could not satisfy device specification '/job:localhost/replica:0/task:0/device:GPU:0'.*" \
               r"All available devices \[/job:localhost/replica:0/task:0/device:CPU:0"
    with pytest.raises(tf.errors.InvalidArgumentError, match=expected):
        with strategy.scope():
            model = small_model()
            model.compile(optimizer="sgd", loss="mse")
            model.fit(x, y, epochs=1, verbose=0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="GPUs this process does not have"):
        strategy.run(lambda: tf.constant(1.0))
    with pytest.raises(tf.errors.InvalidArgumentError):
        strategy.reduce("SUM", 1.0, axis=None)
    # A CPU device that does not exist is refused at once, as before.
    with pytest.raises(ValueError, match="'/cpu:7' does not exist"):
        tf.distribute.MirroredStrategy(devices=["/cpu:0", "/cpu:7"])
    with pytest.raises(ValueError, match="listed twice"):
        tf.distribute.MirroredStrategy(devices=["/gpu:0", "/gpu:0"])


def _fit_weights(strategy):
    x, y = data()
    with strategy.scope():
        model = small_model()
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    return model.get_weights()


@needs_no_gpu
def test_multi_worker_with_nccl_options_runs_on_cpus_as_tf(tmp_path, logical_cpus):
    theirs = run_keras("""
        import numpy as np, tensorflow as tf
        opts = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.NCCL)
        s = tf.distribute.MultiWorkerMirroredStrategy(communication_options=opts)
        with s.scope():
            m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
            m.compile("sgd", "mse")
        m.fit(np.ones((8, 4)), np.ones((8, 2)), verbose=0, batch_size=4)
        print("TF RAN", s.num_replicas_in_sync)
    """, tmp_path).strip().splitlines()[-1]
    assert theirs == "TF RAN 1"
    logical_cpus(2)
    nccl = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=NCCL))
    assert nccl.communication_options.implementation is NCCL and nccl.num_replicas_in_sync == 2
    auto = tf.distribute.MultiWorkerMirroredStrategy()
    for a, b in zip(_fit_weights(nccl), _fit_weights(auto)):
        np.testing.assert_array_equal(a, b)


JOB = """
import sys
import numpy as np
import mdtrain as tf
implementation = getattr(tf.distribute.experimental.CommunicationImplementation, sys.argv[1])
strategy = tf.distribute.MultiWorkerMirroredStrategy(
    communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation))
rng = np.random.default_rng(0)
x, y = rng.normal(size=(32, 4)).astype(np.float32), rng.normal(size=(32, 2)).astype(np.float32)
tf.keras.utils.set_random_seed(3)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
if strategy.cluster_resolver.task_id == 0:
    np.savez(sys.argv[2], *model.get_weights())
"""


@needs_no_gpu
@needs_mpi
def test_two_workers_with_nccl_options_train_as_with_auto(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    out = {}
    for implementation in ("NCCL", "AUTO"):
        path = tmp_path / f"{implementation}.npz"
        cmd = [sys.executable, "-m", "mdtrain.launch", "-n", "2", "--devices-per-worker", "1",
               str(tmp_path / "job.py"), implementation, str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        with np.load(path) as f:
            out[implementation] = [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]
    for a, b in zip(out["NCCL"], out["AUTO"]):
        np.testing.assert_array_equal(a, b)
