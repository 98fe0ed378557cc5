"""One worker of a keras.distribution.PipelineParallel job on a Functional residual CNN whose pipe
axis spans the workers (tests/py/test_functional_pipeline.py, launched with 2 workers x 2 logical
CPU devices): stage 0 (the stem and a residual block) on worker 0, stage 1 (the second block and the
head) on worker 1, activations and gradients over MPI, the stages gathered at each epoch's end. An
L2 penalty on a layer inside each block: the loss adds both stages' penalties on every worker, per
layer of the model. Every worker compares fit's losses, get_weights and the optimizer slots with
the same model on one device, and prints one RESULT line (what every worker must agree on); exits
non-zero on a mismatch."""
import json
import os
import sys
import warnings

import numpy as np

import mdtrain as tf

keras = tf.keras
layers = tf.keras.layers
distribution = tf.keras.distribution
rng = np.random.default_rng(3)
x = rng.standard_normal((60, 8, 8, 3)).astype("float32")
y = rng.integers(0, 10, size=60)
worker = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))


def make_model():
    tf.keras.utils.set_random_seed(11)
    inputs = keras.Input((8, 8, 3))
    h = layers.Conv2D(8, 3, padding="same", activation="relu", name="stem")(inputs)
    for b in range(2):
        r = layers.Conv2D(8, 3, padding="same", activation="relu", name=f"block{b}_conv1")(h)
        r = layers.Conv2D(8, 3, padding="same", name=f"block{b}_conv2",
                          kernel_regularizer=tf.keras.regularizers.L2(0.01))(r)
        h = layers.Add(name=f"block{b}_add")([h, r])
        if b == 0:
            h = layers.PipelineSplit(name="split")(h)
    outputs = layers.Dense(10, name="head")(layers.GlobalAveragePooling2D(name="pool")(h))
    return keras.Model(inputs, outputs, name="residual_cnn")


def run(strategy):
    with strategy.scope():
        m = make_model()
        m.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = m.fit(x, y, batch_size=20, epochs=2, shuffle=False, verbose=0)
    return m, history.history["loss"]


def close(a, b, what):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or not np.allclose(a, b, rtol=1e-5, atol=1e-6):
        raise SystemExit(f"worker {worker}: {what} differs: max |diff| "
                         f"{np.max(np.abs(a - b)) if a.shape == b.shape else (a.shape, b.shape)}")


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # few micro-batches for the stages: the bubble warning
    mesh = distribution.DeviceMesh((2,), ("pipe",), devices=[f"/job:worker/replica:0/task:{t}/device:CPU:0"
                                                             for t in (0, 1)])
    pp = distribution.PipelineParallel(mesh, num_microbatches=3, schedule="1f1b")
assert mesh._core.num_workers == 2
(got, got_loss), (want, want_loss) = run(pp), run(tf.distribute.OneDeviceStrategy("/cpu:0"))
starts = pp.stage_report(got)["stage_starts"]
split = [layer.name for layer in got.layers].index("split")
assert starts == [0, split, len(got.layers)], starts
close(got_loss, want_loss, "fit's losses")
gw, ww = got.get_weights(), want.get_weights()
assert len(gw) == len(ww), (len(gw), len(ww))
for i, (a, b) in enumerate(zip(gw, ww)):
    close(a, b, f"weight {i}")
gs, ws = dict(got._core.optimizer_state()), dict(want._core.optimizer_state())
assert sorted(gs) == sorted(ws), (sorted(gs), sorted(ws))
for name in ws:
    close(gs[name], ws[name], f"optimizer slot {name}")
print("RESULT " + json.dumps([float(v) for v in got_loss]), flush=True)
sys.exit(0)
