"""keras.distribution.PipelineParallel through fit: a Sequential cut into stages (PipelineSplit markers,
layer indices, or balanced by parameters) trains to the loss and weights of one device (float32
rounding of the micro-batches' summed gradients), GPipe and 1F1B bitwise equal, 2 x 2 (batch x pipe)
meshes; fewer micro-batches than stages is a ValueError before training and few of them warn with the
bubble fraction; a balanced cut minimizes the costliest stage; step_time_breakdown reports each stage's busy and idle time; keeping each in-flight
micro-batch's activations (the default) and recomputing them (recompute=True) give bitwise equal weights."""
import json
import os
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

import mdtrain as tf
from mdtrain import _core
from conftest import assert_same_training, fit_for_comparison

distribution = tf.keras.distribution


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((200, 20)).astype("float32")
    y = (np.arange(200) * 7 % 5).astype("int32")
    return x, y


def _mlp(split=False, seed=7):
    tf.keras.utils.set_random_seed(seed)
    layers = [tf.keras.Input((20,)), tf.keras.layers.Dense(32, activation="relu", name="d0"),
              tf.keras.layers.Dense(32, activation="tanh", name="d1")]
    if split:
        layers.append(tf.keras.layers.PipelineSplit())
    layers += [tf.keras.layers.Dense(16, activation="relu", name="d2"), tf.keras.layers.Dense(5, name="out")]
    return tf.keras.Sequential(layers)


def _train(strategy, x, y, split=False, epochs=2, batch_size=45):
    return fit_for_comparison(strategy, lambda: _mlp(split), x, y, epochs, batch_size)


def _pp(mesh, m, schedule, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return distribution.PipelineParallel(mesh, num_microbatches=m, schedule=schedule, **kwargs)


@pytest.mark.parametrize("split", [True, False])
def test_two_stages_train_like_one_device_and_schedules_agree_bitwise(logical_cpus, data, split):
    logical_cpus(2)
    x, y = data
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
    one = _train(tf.distribute.OneDeviceStrategy("/cpu:0"), x, y, split=split)
    # batches of 45 rows in 4 micro-batches: 12, 11, 11, 11; the last batch has 20 rows
    gpipe = _train(_pp(mesh, 4, "gpipe"), x, y, split=split)
    one_f_one_b = _train(_pp(mesh, 4, "1f1b"), x, y, split=split)
    assert_same_training(gpipe, one)
    for a, b in zip(gpipe[0].get_weights(), one_f_one_b[0].get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(gpipe[0].predict(x, verbose=0), one[0].predict(x, verbose=0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gpipe[0].evaluate(x, y, verbose=0), one[0].evaluate(x, y, verbose=0), rtol=1e-5)


def test_four_stages_by_indices_and_a_batch_by_pipe_mesh(logical_cpus, data):
    logical_cpus(4)
    x, y = data
    one = _train(tf.distribute.OneDeviceStrategy("/cpu:0"), x, y)
    four = distribution.DeviceMesh((4,), ("pipe",), devices=distribution.list_devices()[:4])
    assert_same_training(_train(_pp(four, 5, "1f1b", stages=[1, 2, 3]), x, y), one)
    grid = distribution.DeviceMesh((2, 2), ("batch", "pipe"), devices=distribution.list_devices()[:4])
    pp = _pp(grid, 2, "gpipe", batch_dim_name="batch", stages="balance_params")
    assert_same_training(_train(pp, x, y), one)
    assert pp.num_replicas_in_sync == 2
    timed = _pp(four, 4, "1f1b", stages="balance_time")
    model, _ = _train(timed, x, y, epochs=1)
    starts = timed.stage_report(model)["stage_starts"]
    assert starts[0] == 0 and starts[-1] == 4 and sorted(set(starts)) == starts and len(starts) == 5


def test_the_balanced_cut_minimizes_the_costliest_stage_and_leaves_the_math_alone(logical_cpus, data):
    # 20-128-160-5: 2.7 k, 20.6 k and 0.8 k parameters. Cutting once half the parameters are behind
    # (the earlier greedy cut) made stages [d0 d1 | d2]: 23.3 k against 0.8 k. The balanced cut is
    # [d0 | d1 d2]: 21.4 k at most. Where the stages are cut moves no arithmetic: the weights
    # are bitwise those of the other cut.
    logical_cpus(2)
    x, y = data
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])

    def train(stages):
        pp = _pp(mesh, 4, "1f1b", stages=stages)
        with pp.scope():
            tf.keras.utils.set_random_seed(5)
            model = tf.keras.Sequential([tf.keras.Input((20,)), tf.keras.layers.Dense(128, activation="relu"),
                                         tf.keras.layers.Dense(160, activation="relu"), tf.keras.layers.Dense(5)])
            model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=40, epochs=1, shuffle=False, verbose=0)
        return pp.stage_report(model)["stage_starts"], model.get_weights()

    balanced, weights = train("balance_params")
    assert balanced == [0, 1, 3]
    assert list(_core.balance_stages([20 * 128 + 128, 128 * 160 + 160, 160 * 5 + 5], 2)) == [1]
    greedy, greedy_weights = train([2])
    assert greedy == [0, 2, 3]
    for a, b in zip(weights, greedy_weights):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="3 layers cannot fill 4 stages"):
        _core.balance_stages([1, 2, 3], 4)


@pytest.mark.parametrize("mesh_shape", [(2,), (2, 2)])
def test_evaluate_and_predict_flow_through_the_stages_like_the_unpipelined_model(logical_cpus, data, mesh_shape):
    # Inference runs micro-batches forward stage to stage (softmax output: the loss from the last
    # stage's logits); batches of 45 and 37 rows cut unevenly over pipelines and micro-batches.
    logical_cpus(4)
    x, y = data
    names = ("batch", "pipe")[-len(mesh_shape):]
    mesh = distribution.DeviceMesh(mesh_shape, names, devices=distribution.list_devices()[:int(np.prod(mesh_shape))])
    pp = _pp(mesh, 3, "1f1b", batch_dim_name="batch" if len(mesh_shape) == 2 else None)

    def softmax_mlp():
        tf.keras.utils.set_random_seed(7)
        return tf.keras.Sequential([tf.keras.Input((20,)), tf.keras.layers.Dense(32, activation="relu"),
                                    tf.keras.layers.PipelineSplit(), tf.keras.layers.Dense(16, activation="tanh"),
                                    tf.keras.layers.Dense(5, activation="softmax")])

    with pp.scope():
        piped = softmax_mlp()
        piped.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    piped.fit(x, y, batch_size=45, epochs=1, shuffle=False, verbose=0)
    plain = softmax_mlp()
    plain.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    plain.set_weights(piped.get_weights())
    for batch_size in (45, 37):
        np.testing.assert_allclose(piped.predict(x, batch_size=batch_size, verbose=0),
                                   plain.predict(x, batch_size=batch_size, verbose=0), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(piped.evaluate(x, y, batch_size=batch_size, verbose=0),
                                   plain.evaluate(x, y, batch_size=batch_size, verbose=0), rtol=1e-6)
    # Weights set on the model reach the stages.
    piped.set_weights([w * 0.5 for w in plain.get_weights()])
    plain.set_weights([w * 0.5 for w in plain.get_weights()])
    np.testing.assert_allclose(piped.predict(x, verbose=0), plain.predict(x, verbose=0), rtol=1e-6, atol=1e-7)


def test_ignore_class_divides_by_the_global_batch_labels(logical_cpus, data):
    # The divisor is the labels left over the whole global batch, counted by the last stages and
    # summed over the batch axis: the same loss and weights as one device.
    logical_cpus(4)
    x, y = data

    def train(strategy):
        with strategy.scope():
            model = _mlp(split=True)
            model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                                             ignore_class=2))
        history = model.fit(x, y, batch_size=45, epochs=1, shuffle=False, verbose=0)
        return model, history.history["loss"]

    grid = distribution.DeviceMesh((2, 2), ("batch", "pipe"), devices=distribution.list_devices()[:4])
    assert_same_training(train(_pp(grid, 3, "1f1b", batch_dim_name="batch")),
                          train(tf.distribute.OneDeviceStrategy("/cpu:0")))


def test_too_few_microbatches_is_a_value_error_and_few_warn_with_the_bubble(logical_cpus):
    logical_cpus(4)
    mesh = distribution.DeviceMesh((4,), ("pipe",), devices=distribution.list_devices()[:4])
    with pytest.raises(ValueError, match=r"num_microbatches=3 must be an int >= the number of stages \(4\)"):
        distribution.PipelineParallel(mesh, num_microbatches=3)
    with pytest.warns(UserWarning, match=r"idle for about 43% of a step"):  # (4-1)/(4+4-1)
        distribution.PipelineParallel(mesh, num_microbatches=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        distribution.PipelineParallel(mesh, num_microbatches=16)
    with pytest.raises(ValueError, match="schedule"):
        distribution.PipelineParallel(mesh, num_microbatches=16, schedule="zigzag")
    with pytest.raises(ValueError, match="pipe_dim_name"):
        distribution.PipelineParallel(mesh, num_microbatches=16, pipe_dim_name="stage")


def test_pipeline_split_is_a_no_op_on_one_device(data):
    x, _ = data
    plain, marked = _mlp(split=False), _mlp(split=True)
    marked.set_weights(plain.get_weights())  # layers are seeded by position: the marker shifts them
    np.testing.assert_array_equal(plain.predict(x, verbose=0), marked.predict(x, verbose=0))


def test_a_model_with_pipeline_splits_saves_and_loads_back(data, tmp_path):
    x, _ = data
    marked = _mlp(split=True)
    path = str(tmp_path / "marked.keras")
    marked.save(path)
    loaded = tf.keras.models.load_model(path)
    assert [type(layer).__name__ for layer in loaded.layers] == [type(layer).__name__ for layer in marked.layers]
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), marked.predict(x, verbose=0))
    with pytest.raises(ValueError, match="identity"):
        tf.keras.layers.PipelineSplit(activation="relu")


def test_step_time_breakdown_has_each_stage_busy_and_idle(logical_cpus, data):
    logical_cpus(2)
    x, y = data
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
    pp = _pp(mesh, 2, "gpipe")
    model, _ = _train(pp, x, y, split=True, epochs=1)
    report = model.step_time_breakdown()
    assert len(report["stages"]) == 2
    for stage in report["stages"]:
        assert stage["busy"] > 0 and stage["idle"] >= 0
        # Both passes ran and add up to busy.
        assert stage["forward"] > 0 and stage["backward"] > 0
        assert stage["forward"] + stage["backward"] == pytest.approx(stage["busy"])
    assert pp.stage_report(model)["stage_starts"] == [0, 2, 5]
    # The simulated bubble of the schedule is the formula.
    assert _core.pipeline_bubble_fraction("gpipe", 4, 8) == pytest.approx(3 / 11)


def test_batch_norm_moving_statistics_and_dropout_do_not_depend_on_the_micro_batch_count(logical_cpus, data):
    logical_cpus(2)
    x, y = data
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])

    def one_step(strategy, batch_norm=True):
        with strategy.scope():
            tf.keras.utils.set_random_seed(5)
            model = tf.keras.Sequential([
                tf.keras.Input((20,)), tf.keras.layers.Dense(16, activation="relu", name="d0"),
                tf.keras.layers.Dropout(0.25, seed=3), tf.keras.layers.PipelineSplit(),
                tf.keras.layers.BatchNormalization(momentum=0.5, name="bn") if batch_norm else
                tf.keras.layers.Dense(8, name="bn"), tf.keras.layers.Dense(5, name="out")])
            model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)  # one global batch
        bn = next(layer for layer in model.layers if layer.name == "bn")
        return bn.get_weights(), model.get_weights()

    (bn_one, w_one) = one_step(tf.distribute.OneDeviceStrategy("/cpu:0"))
    (bn_two, w_two) = one_step(_pp(mesh, 2, "gpipe"))
    (bn_eight, w_eight) = one_step(_pp(mesh, 8, "1f1b"))
    for got in (bn_two, bn_eight):
        for a, b in zip(got[2:], bn_one[2:]):  # moving mean, moving variance
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # Dropout masks are keyed by global row: without BatchNormalization (whose normalization does use
    # per-micro-batch statistics) the step is the one-device step at any micro-batch count.
    _, want = one_step(tf.distribute.OneDeviceStrategy("/cpu:0"), batch_norm=False)
    for m in (2, 8):
        _, got = one_step(_pp(mesh, m, "1f1b"), batch_norm=False)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _bn_dropout_model(stages):
    tf.keras.utils.set_random_seed(11)
    layers = [tf.keras.Input((20,)), tf.keras.layers.Dense(32, activation="relu"),
              tf.keras.layers.Dropout(0.25, seed=3), tf.keras.layers.BatchNormalization(momentum=0.5)]
    layers += [tf.keras.layers.PipelineSplit()] if stages == 4 else []
    layers += [tf.keras.layers.Dense(24, activation="tanh"), tf.keras.layers.PipelineSplit(),
               tf.keras.layers.Dense(16, activation="relu")]
    layers += [tf.keras.layers.PipelineSplit()] if stages == 4 else []
    layers += [tf.keras.layers.Dense(5)]
    return tf.keras.Sequential(layers)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("mesh_shape", [(2,), (4,), (2, 2)])
def test_kept_activations_and_recomputation_give_bitwise_equal_weights(logical_cpus, data, schedule, mesh_shape):
    # recompute=False (the default) keeps each in-flight micro-batch's activations in its own copy of
    # the stage's layers; recompute=True re-runs the forward before the backward. Same values, same
    # order of the gradient sums, BatchNormalization's statistics recorded once per micro-batch, Dropout
    # masks keyed by global row: bitwise the same weights, uneven micro-batches (45 rows in 5).
    logical_cpus(4)
    x, y = data
    names = ("batch", "pipe")[-len(mesh_shape):]
    mesh = distribution.DeviceMesh(mesh_shape, names, devices=distribution.list_devices()[:int(np.prod(mesh_shape))])
    stages = mesh_shape[-1]
    runs = {}
    for recompute in (False, True):
        pp = _pp(mesh, 5, schedule, batch_dim_name="batch" if len(mesh_shape) == 2 else None, recompute=recompute)
        assert pp.recompute is recompute
        with pp.scope():
            model = _bn_dropout_model(stages)
            model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(x, y, batch_size=45, epochs=2, shuffle=False, verbose=0)
        runs[recompute] = (model.get_weights(), history.history["loss"], pp.stage_report(model))
    (kept, kept_loss, kept_report), (again, again_loss, again_report) = runs[False], runs[True]
    assert kept_loss == again_loss
    for a, b in zip(kept, again):
        np.testing.assert_array_equal(a, b)
    for k, r in zip(kept_report["devices"], again_report["devices"]):
        assert k["peak_stash_bytes"] == r["peak_stash_bytes"]  # the inputs are stashed either way
        assert k["peak_activation_bytes"] >= r["peak_activation_bytes"] > r["peak_stash_bytes"]
    if schedule == "gpipe":  # 5 micro-batches in flight: 5 sets of layer state against one
        assert kept_report["devices"][0]["peak_activation_bytes"] > again_report["devices"][0]["peak_activation_bytes"]


def test_recompute_must_be_a_bool(logical_cpus):
    logical_cpus(2)
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=distribution.list_devices()[:2])
    for bad in (1, "yes", None):
        with pytest.raises(TypeError, match="recompute"):
            distribution.PipelineParallel(mesh, num_microbatches=8, recompute=bad)
    assert distribution.PipelineParallel(mesh, num_microbatches=8).recompute is False


@pytest.mark.skipif(shutil.which("mpirun") is None or not _core.mpi_available(),
                    reason="needs mpirun and an mdtrain built with MPI")
def test_2_workers_x_2_stages_train_like_one_device():
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "pipeline_keras_job.py")
    cmd = [sys.executable, "-m", "mdtrain.launch", "-n", "2", "--devices-per-worker", "2", job]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the two workers share stdout, so their lines may run together: find each report wherever it is
    results = [json.loads(m) for m in re.findall(r"RESULT (\[[^\[\]]*\])", proc.stdout)]
    assert len(results) == 2  # both workers checked and printed
    assert results[0] == results[1]  # every worker saw the same losses


@pytest.mark.skipif(shutil.which("mpirun") is None or not _core.mpi_available(),
                    reason="needs mpirun and an mdtrain built with MPI")
def test_stages_across_2_workers_train_evaluate_and_save_like_one_device_on_every_worker():
    # The job (2 workers x 2 logical devices) checks on each worker, against one device, fit's
    # losses and accuracy, get_weights, the optimizer slots, evaluate, predict and a saved .keras
    # file, for 2 stages on 2 workers x 1 device and a (pipe 2, batch 2) mesh; with BatchNormalization
    # against the same pipeline in one process; and that 2 stages per worker are refused. Also that
    # every worker's per-batch logs equal one device's, and (2x1) that the stages are gathered lazily:
    # 4 gathers in 2 epochs of 4 steps (the epoch ends, 2 mid-epoch saves), get_weights
    # refused mid-epoch, checkpoints at epoch ends and mid-epoch equal one device's, and mid-epoch
    # savers on one worker only refused on both before any step; all asserted in the job.
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "pipeline_across_workers_job.py")
    cmd = [sys.executable, "-m", "mdtrain.launch", "-n", "2", "--devices-per-worker", "2", job]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the two workers share stdout, so their lines may run together: find each report wherever it is
    refused = re.findall(r"REFUSED \[pipeline\] the pipe axis 'pipe' of DeviceMesh\(shape=\[4\]", proc.stdout)
    assert len(refused) == 2
    results = [json.loads(m) for m in re.findall(r"RESULT (\{(?:[^{}]|\{[^{}]*\})*\})", proc.stdout)]
    assert len(results) == 2  # both workers checked and printed
    assert results[0] == results[1]  # every worker saw the same losses, metrics and weights
    assert set(results[0]) == {"2x1", "2x2", "bn"}
