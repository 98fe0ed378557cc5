"""TF's distribute tutorials, as written in examples/tf_tutorials/ (import changed to mdtrain),
run as scripts; each test checks what its tutorial shows."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mdtrain as tf

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TUTORIALS = os.path.join(REPO, "examples", "tf_tutorials")


def run_tutorial(name, devices=2):
    env = dict(os.environ, MDTRAIN_NUM_CPU_DEVICES=str(devices))
    env.pop("MDTRAIN_TUTORIAL_FULL", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(tf.__file__)),
                                                    env.get("PYTHONPATH")] if p)
    proc = subprocess.run([sys.executable, os.path.join(TUTORIALS, name)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-3000:]
    return json.loads(lines[-1][len("RESULT "):]), proc.stdout


def test_custom_training():
    result, out = run_tutorial("custom_training.py")
    assert "Number of devices: 2" in out and result["replicas"] == 2
    # Training with strategy.run under tf.function: the scaled loss falls, epoch after epoch.
    losses = result["losses"]
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert result["test_accuracies"][-1] > 0.6, result
    # The checkpoint of the last even epoch, restored into a new model without a strategy, gives
    # the test accuracy that model had when it was saved.
    assert result["checkpoint"].endswith("ckpt-2.weights.h5")
    assert result["restored_accuracy"] == result["test_accuracies"][result["saved_epoch"]]
    # The other ways of iterating (iterators, a whole epoch inside tf.function) keep training.
    assert result["epoch_losses"][-1] < losses[-1], result


def test_distributed_input():
    result, _ = run_tutorial("input.py")
    assert np.allclose(result["plain_last"], 0.7)
    assert result["first_batch_replica_rows"] == [8, 8]  # the global batch of 16 cut in two
    assert result["for_loop_steps"] == 7  # 100 elements in batches of 16
    # get_next_as_optional ends the loop inside tf.function; the last batch [8] leaves replica 1 empty.
    assert result["optional_batches"] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8], []]]
    # input_signature=[dist_dataset.element_spec] accepts every step's per-replica values.
    assert result["element_spec_calls"] == 1
    assert result["ordered"] == {str(i): 2 * i for i in range(24)}
    assert result["value_fn"] == [0, 1]
    assert result["generator_shapes"] == [[2], [2]]


def test_keras():
    result, _ = run_tutorial("keras.py")
    assert result["replicas"] == 2
    losses = result["losses"]
    assert losses[-1] < losses[0] / 2, losses
    assert result["checkpoints"] == [f"ckpt_{e}.weights.h5" for e in range(1, 9)]
    assert result["latest"].endswith("ckpt_8.weights.h5")
    # LearningRateScheduler(decay): 1e-3 for epochs 1-3, 1e-4 for 4-7, 1e-5 after.
    assert np.allclose(result["learning_rates"], [1e-3] * 3 + [1e-4] * 4 + [1e-5], rtol=1e-6)
    # The saved model evaluates the same loaded without and with the strategy's scope.
    loss, accuracy = result["eval"]
    for other in (result["eval_unreplicated"], result["eval_replicated"]):
        assert other[1] == accuracy
        assert other[0] == pytest.approx(loss, rel=1e-6)
    assert result["logs"] == ["train"]


def test_save_and_load():
    result, _ = run_tutorial("save_and_load.py")
    loss, accuracy = result["saved_eval"]
    for restored in (result["restored_eval"], result["restored_ds_eval"]):
        assert restored[1] == accuracy
        assert restored[0] == pytest.approx(loss, rel=1e-6)
    # The restored model keeps training (compiled state restored) with or without a strategy.
    for losses in (result["restored_losses"], result["restored_ds_losses"]):
        assert losses[-1] < losses[0] and losses[0] < loss * 1.2, result
    assert result["distributed_inference_matches"]


@pytest.mark.skipif(shutil.which("mpirun") is None or not tf._core.mpi_available(),
                    reason="needs mpirun and an mdtrain built with MPI")
def test_multi_worker_with_keras():
    result, _ = run_tutorial("multi_worker_with_keras.py", devices=1)
    single = result["single_worker_losses"]
    assert single[-1] < single[0]
    workers = result["workers"]
    assert [w["task"] for w in workers] == [["worker", 0], ["worker", 1]]
    assert all(w["replicas"] == 2 for w in workers)
    # Both workers trained one model: the same losses and the same weights.
    assert workers[0]["losses"] == workers[1]["losses"]
    assert workers[0]["weights_sum"] == workers[1]["weights_sum"]
    assert workers[0]["losses"][-1] < workers[0]["losses"][0]
    # Fault tolerance: the saved model and the checkpoint load and train on; BackupAndRestore trains.
    assert result["checkpoint"] == "ckpt-1.weights.h5"
    for key in ("loaded_losses", "restored_losses", "backup_losses"):
        assert result[key][-1] < result[key][0], (key, result[key])
    assert "keras-model.keras" in result["files"] and not any(f.startswith("workertemp") for f in result["files"])
