"""Functional models under the executors that cut the network into stages: a small ResNet-style CNN
(residual Add blocks) trains under PipelineParallel with a whole block inside a stage, with the cut
between two blocks (a PipelineSplit in the graph, or layer names), balanced by parameters, and on a
2 x 2 (batch x pipe) mesh, to the losses and weights of one device (float32 rounding of the
micro-batches' summed gradients), GPipe and 1F1B bitwise equal; a BatchNormalization inside a block
moves its statistics once per global batch; a cut inside a block is a ValueError naming the layer. WavefrontPipeline trains a Functional stack of LSTMs with a residual
head like one device. (ModelParallel on the same residual CNN: test_functional_model_parallel.py.)"""
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
from conftest import fit_for_comparison

keras = tf.keras
layers = tf.keras.layers
distribution = tf.keras.distribution

# Float32 reordering only: the micro-batches' (time chunks') gradients are summed one by one
# instead of in one GEMM over the batch (the sequence), and on a batch axis over the pipelines.
# Measured after the 10 Adam steps here, which move the weights by up to ~1e-2 (~6e-3 for the
# recurrent model): losses differ by ~3e-9 relative, weights by at most ~1.3e-7 (~3e-8) absolute.
# A wrong gradient anywhere would show at the scale of the steps, far above these tolerances.
LOSS_RTOL = 1e-6
WEIGHT_RTOL, WEIGHT_ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((96, 8, 8, 3)).astype("float32")
    y = rng.integers(0, 10, size=96)
    return x, y


def _residual_cnn(split=None, seed=11):
    """stem, block0 (conv1, conv2, add, relu), block1 (the same), pool, head. ``split``: where a
    PipelineSplit goes ("between": after block0; "inside": between block0's two convolutions)."""
    tf.keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 3))
    x = layers.Conv2D(8, 3, padding="same", activation="relu", name="stem")(inputs)
    for b in range(2):
        h = layers.Conv2D(8, 3, padding="same", activation="relu", name=f"block{b}_conv1")(x)
        if split == "inside" and b == 0:
            h = layers.PipelineSplit(name="split_inside")(h)
        h = layers.Conv2D(8, 3, padding="same", name=f"block{b}_conv2")(h)
        x = layers.Activation("relu", name=f"block{b}_relu")(layers.Add(name=f"block{b}_add")([x, h]))
        if split == "between" and b == 0:
            x = layers.PipelineSplit(name="split_between")(x)
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    outputs = layers.Dense(10, name="head")(x)
    return keras.Model(inputs, outputs, name="residual_cnn")


def _pp(mesh, m, schedule="1f1b", **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few micro-batches: the bubble warning
        return distribution.PipelineParallel(mesh, num_microbatches=m, schedule=schedule, **kwargs)


def _train(strategy, x, y, split=None, epochs=2, batch_size=20):
    # Batches of 20 (the last of 16) in 4 micro-batches of 5 (4).
    return fit_for_comparison(strategy, lambda: _residual_cnn(split), x, y, epochs, batch_size)


def _assert_like_one_device(got, want):
    (model, loss), (ref, ref_loss) = got, want
    np.testing.assert_allclose(loss, ref_loss, rtol=LOSS_RTOL)
    weights, ref_weights = model.get_weights(), ref.get_weights()
    assert len(weights) == len(ref_weights)
    for a, b in zip(weights, ref_weights):
        np.testing.assert_allclose(a, b, rtol=WEIGHT_RTOL, atol=WEIGHT_ATOL)


def _pipe(n):
    return distribution.DeviceMesh((n,), ("pipe",), devices=distribution.list_devices()[:n])


def _one(x, y, split=None):
    return _train(tf.distribute.OneDeviceStrategy("/cpu:0"), x, y, split=split)


def test_a_whole_block_inside_a_stage_trains_like_one_device(logical_cpus, images):
    logical_cpus(2)
    x, y = images
    one = _one(x, y)
    # Stage 0: the stem alone; stage 1: both blocks, the pool and the head.
    gpipe = _pp(_pipe(2), 4, "gpipe", stages=["block0_conv1"])
    got = _train(gpipe, x, y)
    _assert_like_one_device(got, one)
    assert gpipe.stage_report(got[0])["stage_starts"] == [0, 1, len(got[0].layers)]
    one_f_one_b = _train(_pp(_pipe(2), 4, "1f1b", stages=["block0_conv1"]), x, y)
    for a, b in zip(got[0].get_weights(), one_f_one_b[0].get_weights()):
        np.testing.assert_array_equal(a, b)
    # the training moved the weights
    start = _residual_cnn().get_weights()
    assert any(not np.allclose(a, b) for a, b in zip(got[0].get_weights(), start))
    np.testing.assert_allclose(got[0].predict(x, verbose=0), one[0].predict(x, verbose=0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[0].evaluate(x, y, verbose=0), one[0].evaluate(x, y, verbose=0), rtol=1e-5)


def test_the_cut_between_two_blocks_at_a_pipeline_split(logical_cpus, images):
    logical_cpus(2)
    x, y = images
    one = _one(x, y, split="between")
    pp = _pp(_pipe(2), 4)
    got = _train(pp, x, y, split="between")
    _assert_like_one_device(got, one)
    names = [layer.name for layer in got[0].layers]
    assert pp.stage_report(got[0])["stage_starts"] == [0, names.index("split_between"), len(names)]
    # The same cut by layer index (model.layers) and by name, with recomputation: bitwise the same.
    for stages in ([names.index("split_between")], ["block1_conv1"]):
        other = _train(_pp(_pipe(2), 4, stages=stages, recompute=True), x, y, split="between")
        for a, b in zip(got[0].get_weights(), other[0].get_weights()):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("balance", ["balance_params", "balance_time"])
def test_balanced_stages_of_a_graph_start_between_blocks(logical_cpus, images, balance):
    logical_cpus(3)
    x, y = images
    pp = _pp(_pipe(3), 4, stages=balance)
    got = _train(pp, x, y)
    _assert_like_one_device(got, _one(x, y))
    names = [layer.name for layer in got[0].layers]
    # Blocks are never divided: a stage starts at a block's first convolution, at its relu (after
    # the Add) or after the blocks.
    allowed = {names.index(n) for n in ["block0_conv1", "block0_relu", "block1_conv1", "block1_relu", "pool", "head"]}
    starts = pp.stage_report(got[0])["stage_starts"]
    assert starts[0] == 0 and set(starts[1:-1]) <= allowed and len(starts) == 4


def test_2x2_batch_by_pipe_mesh_trains_like_one_device(logical_cpus, images):
    logical_cpus(4)
    x, y = images
    mesh = distribution.DeviceMesh((2, 2), ("batch", "pipe"), devices=distribution.list_devices()[:4])
    pp = _pp(mesh, 2, "gpipe", batch_dim_name="batch")
    got = _train(pp, x, y, split="between")
    assert pp.num_replicas_in_sync == 2
    _assert_like_one_device(got, _one(x, y, split="between"))


@pytest.mark.parametrize("how", ["name", "split"])
def test_a_cut_inside_a_residual_block_is_a_value_error_naming_the_layer(logical_cpus, images, how):
    logical_cpus(2)
    x, y = images
    if how == "name":
        pp, split, layer = _pp(_pipe(2), 2, stages=["block0_conv2"]), None, "block0_conv2"
    else:
        pp, split, layer = _pp(_pipe(2), 2), "inside", "split_inside"
    # the stem's output crosses into the stage (read by the block's Add)
    with pytest.raises(ValueError, match=rf'layer "{layer}" is inside a block.*"stem".*"block0_add"'):
        _train(pp, x, y, split=split, epochs=1)


def test_an_unknown_layer_name_is_a_value_error(logical_cpus, images):
    logical_cpus(2)
    with pytest.raises(ValueError, match="no layer named 'nope'"):
        _train(_pp(_pipe(2), 2, stages=["nope"]), *images, epochs=1)


def _bn_block_model():
    """stem, a block with BatchNormalization inside (conv, bn, relu, add), pool, head."""
    tf.keras.utils.set_random_seed(13)
    inputs = keras.Input((8, 8, 3))
    x = layers.Conv2D(8, 3, padding="same", activation="relu", name="stem")(inputs)
    h = layers.Conv2D(8, 3, padding="same", name="conv")(x)
    h = layers.Activation("relu", name="relu")(layers.BatchNormalization(momentum=0.5, name="bn")(h))
    x = layers.Add(name="add")([x, h])
    x = layers.PipelineSplit(name="split")(x)
    outputs = layers.Dense(10, name="head")(layers.GlobalAveragePooling2D(name="pool")(x))
    return keras.Model(inputs, outputs, name="bn_block")


def test_batch_norm_inside_a_block_records_its_statistics_from_every_micro_batch(logical_cpus, images):
    # The block runs as one unit of stage 0 on a state slot per micro-batch in flight (or, with
    # recompute, on the stage's layers): the BatchNormalization inside it records each micro-batch's
    # statistics and moves them once per global batch, as in a Sequential stage.
    logical_cpus(2)
    x, y = images

    def one_step(strategy):
        with strategy.scope():
            model = _bn_block_model()
            model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)  # one global batch
        return next(layer for layer in model.layers if layer.name == "bn").get_weights(), model.get_weights()

    bn_one, _ = one_step(tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert np.abs(bn_one[2]).max() > 1e-2  # the step moved the moving mean from its zeros
    runs = {}
    for m, schedule, recompute in [(2, "gpipe", False), (8, "1f1b", False), (8, "1f1b", True)]:
        bn, weights = one_step(_pp(_pipe(2), m, schedule, recompute=recompute))
        for a, b in zip(bn[2:], bn_one[2:]):  # moving mean, moving variance
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        runs[(m, recompute)] = weights
    for a, b in zip(runs[(8, False)], runs[(8, True)]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(shutil.which("mpirun") is None or not _core.mpi_available(),
                    reason="needs mpirun and an mdtrain built with MPI")
def test_stages_of_a_graph_across_2_workers_train_like_one_device():
    # The job checks on each worker, against one device: fit's losses, get_weights and the optimizer
    # slots of the residual CNN cut at a PipelineSplit between its blocks, a stage per worker.
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "functional_pipeline_workers_job.py")
    cmd = [sys.executable, "-m", "mdtrain.launch", "-n", "2", "--devices-per-worker", "2", job]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the two workers share stdout, so their lines may run together: find each report wherever it is
    results = [json.loads(m) for m in re.findall(r"RESULT (\[[^\[\]]*\])", proc.stdout)]
    assert len(results) == 2  # both workers checked and printed
    assert results[0] == results[1]  # every worker saw the same losses


# ---- WavefrontPipeline on a Functional stack of recurrent layers --------------------------------

def _recurrent_graph(seed=5, skip_into_r1=False):
    """Input -> r0 -> r1 -> r2 (LSTMs, return_sequences) -> a residual head: Add(r2, Dense(r2)) ->
    Dense. ``skip_into_r1``: r1 also reads the input (Concatenate), so r0..r1 is not a stack."""
    tf.keras.utils.set_random_seed(seed)
    inputs = keras.Input((9, 3))
    h = layers.LSTM(8, return_sequences=True, name="r0")(inputs)
    if skip_into_r1:
        h = layers.Concatenate(name="skip")([h, inputs])
    h = layers.LSTM(8, return_sequences=True, name="r1")(h)
    h = layers.LSTM(8, return_sequences=True, name="r2")(h)
    d = layers.Dense(8, activation="tanh", name="mix")(h)
    h = layers.Add(name="residual")([h, d])
    outputs = layers.Dense(2, name="head")(h)
    model = keras.Model(inputs, outputs, name="recurrent_graph")
    model.compile(optimizer="adam", loss="mse")
    return model


@pytest.fixture(scope="module")
def sequences():
    rng = np.random.default_rng(1)
    return rng.standard_normal((24, 9, 3)).astype("float32"), rng.standard_normal((24, 9, 2)).astype("float32")


def test_wavefront_trains_a_functional_recurrent_stack_like_one_device(logical_cpus, sequences):
    logical_cpus(3)
    x, y = sequences
    ref = _recurrent_graph()
    wave = distribution.WavefrontPipeline(_pipe(3), time_chunk=3)
    with wave.scope():
        piped = _recurrent_graph()
    # Batches of 10: the last one (4 rows) is smaller.
    want = ref.fit(x, y, batch_size=10, epochs=2, shuffle=False, verbose=0).history["loss"]
    got = piped.fit(x, y, batch_size=10, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(got, want, rtol=LOSS_RTOL)
    assert wave.stage_starts(piped) == [0, 1, 2]
    assert int(piped.optimizer.iterations) == 6
    for a, b in zip(piped.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=WEIGHT_RTOL, atol=WEIGHT_ATOL)
    np.testing.assert_allclose(piped.predict(x, verbose=0), ref.predict(x, verbose=0), rtol=1e-4, atol=1e-6)


def test_wavefront_refuses_a_recurrent_layer_that_reads_past_the_one_before(logical_cpus, sequences):
    logical_cpus(2)
    wave = distribution.WavefrontPipeline(_pipe(2), time_chunk=3)
    with wave.scope():
        model = _recurrent_graph(skip_into_r1=True)
    # the model's input is read by r0 and by the Concatenate after it: r0 is no stage of its own
    with pytest.raises(ValueError, match='"r0" reads more than the layer before it'):
        model.fit(*sequences, batch_size=10, epochs=1, verbose=0)
