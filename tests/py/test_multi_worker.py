"""MultiWorkerMirroredStrategy across processes, launched with mpirun on loopback: the same
weights as MirroredStrategy in one process, a SIGKILLed job resumed bit for bit, checkpoints that
move between strategies, and a missing worker reported instead of a hang."""
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import mdtrain as tf
from mdtrain import launch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "examples", "multi_worker_fashion_mnist.py")
BACKUP_JOB = os.path.join(HERE, "jobs", "backup_job.py")
STRAGGLER_JOB = os.path.join(HERE, "jobs", "straggler_job.py")

needs_mpi = pytest.mark.skipif(
    shutil.which("mpirun") is None or not tf._core.mpi_available(),
    reason="needs mpirun and an mdtrain built with MPI (apt-get install openmpi-bin libopenmpi-dev, reinstall)")


def launch_job(n, argv, expect=0, devices=1, timeout=300):
    cmd = [sys.executable, "-m", "mdtrain.launch", "-n", str(n), "--devices-per-worker", str(devices), *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if expect == "failure":
        assert proc.returncode != 0, proc.stdout + proc.stderr
    else:
        assert proc.returncode == expect, proc.stdout + proc.stderr
    return proc


def run_single(argv, devices=2):
    env = dict(os.environ, MDTRAIN_NUM_CPU_DEVICES=str(devices))
    proc = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def npz_weights(path):
    with np.load(path) as f:
        names = sorted((k for k in f.files if k.startswith("arr_")), key=lambda k: int(k.split("_")[1]))
        return [f[k] for k in names]


def assert_bitwise_equal(a, b):
    assert len(a) == len(b)
    for wa, wb in zip(a, b):
        np.testing.assert_array_equal(wa, wb)


def test_launcher_builds_the_mpirun_command():
    cmd = launch.mpirun_command(3, ["train.py", "--epochs", "2"], devices_per_worker=2, python="py",
                                env={"PYTHONPATH": "/x"})
    assert cmd[:3] == ["mpirun", "-n", "3"]
    assert "--oversubscribe" in cmd
    assert cmd[cmd.index("MDTRAIN_NUM_CPU_DEVICES=2") - 1] == "-x"
    assert cmd[cmd.index("PYTHONPATH") - 1] == "-x"
    assert cmd[-4:] == ["py", "train.py", "--epochs", "2"]


def test_launcher_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        launch.main(["-n", "0", "x.py"])
    assert "-n must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        launch.main(["-n", "2", "--mpirun", "no-such-mpirun", "x.py"])
    assert "was not found" in capsys.readouterr().err


def test_tf_config_without_an_mpi_launcher_is_refused(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}')
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="mdtrain.launch -n 2"):
        tf.distribute.MultiWorkerMirroredStrategy()


def test_without_a_launcher_it_is_a_job_of_one_worker(logical_cpus):
    logical_cpus(2)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    assert strategy.num_replicas_in_sync == 2
    assert strategy.cluster_resolver.num_workers == 1 and strategy.cluster_resolver.task_id == 0
    assert strategy.should_checkpoint
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(4,))])
        model.compile(optimizer="sgd", loss="mse")
    model.fit(x, x[:, :2], epochs=1, verbose=0)


def test_bytes_per_pack_sets_the_gradient_bucket_size(logical_cpus):
    logical_cpus(2)
    options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=1 << 16)
    assert tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)._core.gradient_bucket_bytes == 65536
    assert tf.distribute.MultiWorkerMirroredStrategy()._core.gradient_bucket_bytes == 25 << 20
    with pytest.raises(ValueError, match="bytes_per_pack"):
        tf.distribute.experimental.CommunicationOptions(bytes_per_pack=-1)


def test_communication_options_are_checked():
    with pytest.raises(ValueError, match="timeout_seconds"):
        tf.distribute.experimental.CommunicationOptions(timeout_seconds=0)
    with pytest.raises(TypeError, match="CommunicationImplementation"):
        tf.distribute.experimental.CommunicationOptions(implementation=3)
    # NCCL on a CPU machine is accepted, as TensorFlow accepts it (test_strategies_built_as_tf.py).
    tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.NCCL))


@needs_mpi
def test_two_workers_train_the_weights_of_mirrored_on_two_devices(tmp_path):
    common = ["--epochs", "1", "--limit", "3000", "--batch-size", "50"]
    proc = launch_job(2, [EXAMPLE, *common, "--save", str(tmp_path / "mw.mdtrain")])
    assert proc.stdout.count("test accuracy") == 1  # only worker 0 reports
    run_single([EXAMPLE, *common, "--mirrored", "--devices", "2", "--save", str(tmp_path / "mirrored.mdtrain")])
    a = tf.keras.models.load_model(tmp_path / "mw.mdtrain").get_weights()
    b = tf.keras.models.load_model(tmp_path / "mirrored.mdtrain").get_weights()
    # Both sum the two replicas' gradients in rank order in float32: the same bits.
    assert_bitwise_equal(a, b)
    # 4 KB gradient buckets (about 100 of them), each all-reduced from inside backward as soon as
    # its layer is done: the sums, hence the weights, are the same.
    launch_job(2, [EXAMPLE, *common, "--bytes-per-pack", "4096", "--save", str(tmp_path / "packs.mdtrain")])
    assert_bitwise_equal(tf.keras.models.load_model(tmp_path / "packs.mdtrain").get_weights(), a)


@needs_mpi
def test_two_workers_with_two_devices_each(tmp_path):
    common = ["--epochs", "1", "--limit", "2000", "--batch-size", "64"]
    launch_job(2, [EXAMPLE, *common, "--save", str(tmp_path / "mw.mdtrain")], devices=2)
    run_single([EXAMPLE, *common, "--mirrored", "--devices", "4", "--save", str(tmp_path / "mirrored.mdtrain")])
    a = tf.keras.models.load_model(tmp_path / "mw.mdtrain").get_weights()
    b = tf.keras.models.load_model(tmp_path / "mirrored.mdtrain").get_weights()
    # Sums grouped per worker then across workers: equal to float32 rounding, not bitwise.
    for wa, wb in zip(a, b):
        np.testing.assert_allclose(wa, wb, rtol=1e-4, atol=1e-5)


def backup_args(tmp_path, strategy, out, backup, kill_after=0, kill_rank=1):
    args = [BACKUP_JOB, "--strategy", strategy, "--backup-dir", str(tmp_path / backup), "--out",
            str(tmp_path / out)]
    if kill_after:
        args += ["--kill-after-steps", str(kill_after), "--kill-rank", str(kill_rank)]
    return args


@needs_mpi
def test_worker_sigkilled_mid_epoch_then_relaunched_gives_the_uninterrupted_weights(tmp_path):
    launch_job(2, backup_args(tmp_path, "multi_worker", "straight.npz", "b1"))
    # Worker 1 is SIGKILLed in the middle of epoch 2 (13 steps per epoch); mpirun ends the job.
    launch_job(2, backup_args(tmp_path, "multi_worker", "never.npz", "b2", kill_after=20), expect="failure")
    assert not (tmp_path / "never.npz").exists()
    launch_job(2, backup_args(tmp_path, "multi_worker", "resumed.npz", "b2"))
    assert_bitwise_equal(npz_weights(tmp_path / "resumed.npz"), npz_weights(tmp_path / "straight.npz"))


@needs_mpi
def test_backup_moves_between_workers_and_one_process(tmp_path):
    launch_job(2, backup_args(tmp_path, "multi_worker", "straight.npz", "b1"))
    # Two workers -> one process with two logical devices: the same sums, the same bits.
    launch_job(2, backup_args(tmp_path, "multi_worker", "never.npz", "b2", kill_after=17, kill_rank=0),
               expect="failure")
    run_single(backup_args(tmp_path, "mirrored", "to_one.npz", "b2"))
    assert_bitwise_equal(npz_weights(tmp_path / "to_one.npz"), npz_weights(tmp_path / "straight.npz"))
    # And back: one process killed, two workers resume.
    proc = subprocess.run([sys.executable, *backup_args(tmp_path, "mirrored", "never.npz", "b3", kill_after=11,
                                                        kill_rank=0)],
                          env=dict(os.environ, MDTRAIN_NUM_CPU_DEVICES="2"), capture_output=True, timeout=300)
    assert proc.returncode == -9
    launch_job(2, backup_args(tmp_path, "multi_worker", "to_two.npz", "b3"))
    assert_bitwise_equal(npz_weights(tmp_path / "to_two.npz"), npz_weights(tmp_path / "straight.npz"))


@needs_mpi
def test_a_worker_that_never_arrives_is_reported_within_the_timeout(tmp_path):
    proc = launch_job(2, [STRAGGLER_JOB], expect="failure", timeout=120)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("TIMEOUT")), None)
    assert line is not None, proc.stdout + proc.stderr
    seconds = float(line.split()[2].rstrip("s:"))
    assert 1.5 <= seconds < 10, line
    assert "rank 1" in line and "did not arrive" in line, line
    assert "all_reduce" in line or "reduce_scatter" in line or "broadcast" in line, line


MISBEHAVING_JOB = os.path.join(HERE, "jobs", "misbehaving_worker_job.py")


def failure_line(proc, worker=0):
    prefix = f"FAILED on worker {worker} after "
    # Another worker's output may still share the line (mpirun forwards each process's writes as
    # they come): the report starts at the prefix and ends before the next worker's report.
    line = next((l[l.index(prefix):].split("FAILED on worker ")[1] for l in proc.stdout.splitlines() if prefix in l),
                None)
    assert line is not None, proc.stdout + proc.stderr
    line = "FAILED on worker " + line
    return line, float(line[len(prefix):].split()[0].rstrip("s:"))


@needs_mpi
def test_an_exception_on_one_worker_fails_the_others_at_once_naming_it():
    """Worker 1 raises in a callback: worker 0, waiting in the next collective, fails within
    seconds (its timeout is 60 s) with an error naming worker 1 and the exception."""
    start = time.monotonic()
    proc = launch_job(2, [MISBEHAVING_JOB, "raise"], expect="failure", timeout=120)
    line, seconds = failure_line(proc)
    assert seconds < 15, line
    assert "worker 1" in line and "ValueError: boom from a callback" in line, line
    assert time.monotonic() - start < 60, "the job did not end promptly"


@needs_mpi
def test_workers_that_disagree_on_the_batch_size_fail_before_training():
    proc = launch_job(2, [MISBEHAVING_JOB, "batch-size"], expect="failure", timeout=120)
    line, _ = failure_line(proc)
    assert "disagree on batch_size: worker 0 has 32, worker 1 has 64" in line, line


@needs_mpi
def test_a_hung_worker_does_not_keep_its_peers_from_exiting():
    """Worker 1 hangs (never joins, sleeps 120 s): worker 0 times out after 2 s and the whole job
    ends at once instead of waiting for the hung worker at exit."""
    start = time.monotonic()
    proc = launch_job(2, [MISBEHAVING_JOB, "hang"], expect="failure", timeout=110)
    line, seconds = failure_line(proc)
    assert "TimeoutError" in line and seconds < 10, line
    assert time.monotonic() - start < 60, f"the job took {time.monotonic() - start:.0f}s to end"
