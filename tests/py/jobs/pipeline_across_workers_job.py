"""One worker of a keras.distribution.PipelineParallel job whose pipe axis spans the workers
(tests/py/test_pipeline.py, launched with 2 workers x 2 logical CPU devices): stage 0 on worker 0,
stage 1 on worker 1, activations and gradients over MPI. Two meshes over the global devices:

- "2x1": mesh (2,) ("pipe",) on each worker's first device (2 workers x 1 device, 2 stages);
- "2x2": mesh (2, 2) ("pipe", "batch") on every device (2 pipelines x 2 stages, each pipeline across
  the workers, the batch axis inside each worker).

Each trains an MLP with Adam and compares, on every worker, with the same model on one device: fit's
losses and metrics, get_weights, the optimizer state, evaluate, predict and a saved .keras file loaded
back; and that every worker's per-batch logs are the same (summed over the workers each step). With
the stages across workers they are gathered lazily: the 2x1 run checks that no gather happens inside
an epoch (the stage report's count; get_weights mid-epoch refuses), that checkpoints written at each
epoch's end and mid-epoch (ModelCheckpoint with save_freq=3, which gathers first) hold the whole
model, equal to one device's at the same step, and that mid-epoch savers given to one worker only
are refused before training, on every worker. A model with BatchNormalization is compared with the
same pipeline in one process (its normalization uses per-micro-batch statistics, so not with one
device), moving statistics included.
First, a mesh whose pipe axis spans the workers with two stages on each, (4,) ("pipe",), must be a
ValueError before any training (printed as "REFUSED <message>"). Prints one RESULT line per worker
(what every worker must agree on) and exits non-zero on a mismatch."""
import json
import os
import sys
import tempfile
import warnings

import numpy as np

import mdtrain as tf

distribution = tf.keras.distribution
rng = np.random.default_rng(5)
x = rng.standard_normal((90, 12)).astype("float32")
y = (np.arange(90) * 7 % 4).astype("int32")
worker = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))


def make_model(batch_norm=False):
    tf.keras.utils.set_random_seed(11)
    # L2 on a layer of each stage: the loss adds both stages' penalties on every worker.
    layers = [tf.keras.Input((12,)), tf.keras.layers.Dense(16, activation="relu", name="d0",
                                                           kernel_regularizer=tf.keras.regularizers.L2(0.01))]
    if batch_norm:
        layers.append(tf.keras.layers.BatchNormalization(name="bn"))
    layers += [tf.keras.layers.Dense(16, activation="tanh", name="d1"), tf.keras.layers.PipelineSplit(),
               tf.keras.layers.Dense(8, activation="relu", name="d2",
                                         kernel_regularizer=tf.keras.regularizers.L2(0.01)), tf.keras.layers.Dense(4, name="out")]
    return tf.keras.Sequential(layers)


STEPS_PER_EPOCH = 4  # 90 rows in batches of 25


class BatchRecorder(tf.keras.callbacks.Callback):
    """Each batch's logs; under PipelineParallel across workers, whether the stages were whole at
    each batch end and epoch end, and that get_weights mid-epoch refuses (it cannot gather alone)."""

    def __init__(self, pipeline=None):
        super().__init__()
        self.pipeline, self.logs, self.whole_at_batch, self.whole_at_epoch, self.refused = pipeline, [], [], [], 0

    def on_train_batch_end(self, batch, logs=None):
        self.logs.append([float(logs["loss"]), float(logs["accuracy"])])
        if self.pipeline is not None:
            self.whole_at_batch.append(self.pipeline.stage_report(self.model)["stages_whole"])
            if batch == 0:
                try:
                    self.model.get_weights()
                except ValueError as e:
                    assert "gather_stages" in str(e), e
                    self.refused += 1

    def on_epoch_end(self, epoch, logs=None):
        if self.pipeline is not None:
            self.whole_at_epoch.append(self.pipeline.stage_report(self.model)["stages_whole"])


def run(strategy, batch_norm=False, checkpoints=None):
    with strategy.scope():
        m = make_model(batch_norm)
        m.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    recorder = BatchRecorder(strategy if isinstance(strategy, distribution.PipelineParallel) else None)
    callbacks = []
    if checkpoints is not None:  # at each epoch's end, and every 3 steps (mid-epoch: steps 3 and 6)
        callbacks += [tf.keras.callbacks.ModelCheckpoint(os.path.join(checkpoints, "epoch{epoch}.weights.h5"),
                                                         save_weights_only=True),
                      tf.keras.callbacks.ModelCheckpoint(os.path.join(checkpoints, "e{epoch}b{batch}.weights.h5"),
                                                         save_weights_only=True, save_freq=3)]
    callbacks.append(recorder)  # last: it sees the stages after the checkpoints gathered them
    history = m.fit(x, y, batch_size=25, epochs=2, shuffle=False, verbose=0, callbacks=callbacks)
    m.batch_recorder = recorder
    return m, dict(history.history, batch_logs=recorder.logs)


def close(a, b, what):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or not np.allclose(a, b, rtol=1e-5, atol=1e-6):
        raise SystemExit(f"worker {worker}: {what} differs: max |diff| "
                         f"{np.max(np.abs(a - b)) if a.shape == b.shape else (a.shape, b.shape)}")


def compare(got, want, what):
    (gm, gh), (wm, wh) = got, want
    for key in ("loss", "accuracy", "batch_logs"):
        close(gh[key], wh[key], f"{what}: fit's {key}")
    gw, ww = gm.get_weights(), wm.get_weights()
    assert len(gw) == len(ww), (what, len(gw), len(ww))
    for i, (a, b) in enumerate(zip(gw, ww)):
        close(a, b, f"{what}: weight {i}")
    gs, ws = dict(gm._core.optimizer_state()), dict(wm._core.optimizer_state())
    assert sorted(gs) == sorted(ws), (what, sorted(gs), sorted(ws))
    for name in ws:
        close(gs[name], ws[name], f"{what}: optimizer slot {name}")
    close(gm.evaluate(x, y, batch_size=40, verbose=0), wm.evaluate(x, y, batch_size=40, verbose=0),
          f"{what}: evaluate")
    # A restored optimizer state (the executor made again from it) is whole before any step too.
    gm._core.set_optimizer_state(list(gs.items()))
    gm.evaluate(x, y, batch_size=40, verbose=0)
    restored = dict(gm._core.optimizer_state())
    for name in ws:
        close(restored[name], ws[name], f"{what}: restored optimizer slot {name}")
    close(gm.predict(x, batch_size=40, verbose=0), wm.predict(x, batch_size=40, verbose=0), f"{what}: predict")
    path = os.path.join(tempfile.mkdtemp(), f"{what}-{worker}.keras")
    gm.save(path)
    loaded = tf.keras.models.load_model(path)
    for i, (a, b) in enumerate(zip(loaded.get_weights(), ww)):
        close(a, b, f"{what}: saved weight {i}")
    return {"loss": [float(v) for v in gh["loss"]], "accuracy": [float(v) for v in gh["accuracy"]],
            "batch_logs": gh["batch_logs"], "weights": float(sum(np.float64(w).sum() for w in gw))}


def compare_checkpoints(got_dir, want_dir, what):
    """The chief's checkpoints (at each epoch's end and mid-epoch) against one device's."""
    names = ["epoch1.weights.h5", "epoch2.weights.h5", "e1b3.weights.h5", "e2b2.weights.h5"]
    if worker != 0:
        return
    assert sorted(os.listdir(got_dir)) == sorted(names), (what, sorted(os.listdir(got_dir)))
    for name in names:
        got, want = make_model(), make_model()
        got.load_weights(os.path.join(got_dir, name))
        want.load_weights(os.path.join(want_dir, name))
        for i, (a, b) in enumerate(zip(got.get_weights(), want.get_weights())):
            close(a, b, f"{what}: checkpoint {name} weight {i}")


def global_device(task, index):
    return f"/job:worker/replica:0/task:{task}/device:CPU:{index}"


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    four = distribution.DeviceMesh((4,), ("pipe",), devices=distribution.list_devices())
    pp_4 = distribution.PipelineParallel(four, num_microbatches=4, stages=[1, 3, 4])
try:
    with pp_4.scope():
        make_model().compile(optimizer="adam", loss="sparse_categorical_crossentropy")
except ValueError as e:
    print("REFUSED " + str(e).replace("\n", " "), flush=True)
else:
    raise SystemExit(f"worker {worker}: 4 stages over 2 workers (2 on each) were accepted")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # few micro-batches for the stages: the bubble warning
    two_by_one = distribution.DeviceMesh((2,), ("pipe",), devices=[global_device(0, 0), global_device(1, 0)])
    pp_2x1 = distribution.PipelineParallel(two_by_one, num_microbatches=3, schedule="1f1b")
    two_by_two = distribution.DeviceMesh((2, 2), ("pipe", "batch"), devices=distribution.list_devices())
    pp_2x2 = distribution.PipelineParallel(two_by_two, num_microbatches=2, schedule="gpipe", batch_dim_name="batch")
    local = distribution.DeviceMesh((2,), ("pipe",), devices=["cpu:0", "cpu:1"])
    pp_local = distribution.PipelineParallel(local, num_microbatches=3, schedule="1f1b")
assert two_by_one._core.num_workers == 2 and two_by_two._core.num_workers == 2

want_checkpoints, got_checkpoints = tempfile.mkdtemp(), tempfile.mkdtemp()
one_device = run(tf.distribute.OneDeviceStrategy("/cpu:0"), checkpoints=want_checkpoints)
piped = run(pp_2x1, checkpoints=got_checkpoints)
# Each worker reports its own stage, on its own device.
stage_report = pp_2x1.stage_report(piped[0])
assert stage_report["stage_starts"] == [0, 2, 5], stage_report
assert [d["device"] for d in stage_report["devices"]] == [global_device(worker, 0)], stage_report
# Gathered lazily: at each epoch's end (2) and before each mid-epoch save (steps 3 and 6), not after
# each of the 8 steps (fit's start gathers nothing on a model's first fit: no step ran); stale after
# every step but those that saved, whole at epoch ends; get_weights at batch 0 refused, on every worker.
recorder = piped[0].batch_recorder
assert stage_report["gathers"] == 2 + 2, stage_report
assert recorder.whole_at_batch == [False, False, True, False, False, True, False, False], recorder.whole_at_batch
assert recorder.whole_at_epoch == [True, True] and recorder.refused == 2, (recorder.whole_at_epoch, recorder.refused)
compare_checkpoints(got_checkpoints, want_checkpoints, "2x1")
# Mid-epoch savers (a gather each: a collective) on one worker only: refused on every worker before
# any step, instead of a worker waiting forever in a gather the other never starts.
lonely = [tf.keras.callbacks.ModelCheckpoint(os.path.join(tempfile.mkdtemp(), "w.weights.h5"),
                                             save_weights_only=True, save_freq=2)] if worker == 0 else []
try:
    piped[0].fit(x, y, batch_size=25, epochs=1, verbose=0, callbacks=lonely)
except ValueError as e:
    assert "mid_epoch_savers" in str(e), e
else:
    raise SystemExit(f"worker {worker}: a mid-epoch saver on worker 0 only was accepted")
report = {"2x1": compare(piped, one_device, "2x1"), "2x2": compare(run(pp_2x2), one_device, "2x2")}
# BatchNormalization: the cross-worker pipeline against the same pipeline in one process.
report["bn"] = compare(run(pp_2x1, batch_norm=True), run(pp_local, batch_norm=True), "bn")
print("RESULT " + json.dumps(report, sort_keys=True), flush=True)
sys.exit(0)
