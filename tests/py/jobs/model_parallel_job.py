"""One worker of a ModelParallel job across MPI workers (tests/py/test_model_parallel_core.py): a
(workers x 2) batch x model mesh, the model axis on this worker's 2 logical CPU devices. Trains a
split MLP and the same MLP on one device; exits non-zero unless they agree to float32 rounding and
every worker holds the same weights."""
import os

import numpy as np

import mdtrain as tf
from mdtrain import _core

workers = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
mesh = _core.DeviceMesh.for_workers([workers, 2], ["batch", "model"], workers, ["cpu:0", "cpu:1"])
core = _core.ModelParallelStrategy(mesh, {"up/kernel": [None, "model"], "down/kernel": ["model", None],
                                          "head/kernel": [None, "model"]}, "batch")
rng = np.random.default_rng(0)
x = rng.normal(size=(100, 20)).astype(np.float32)
y = rng.integers(0, 4, size=100)


def make():
    tf.keras.utils.set_random_seed(3)
    return tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(20,), name="up"),
                                tf.keras.layers.Dropout(0.2, seed=1, name="drop"),
                                tf.keras.layers.Dense(8, activation="relu", name="down"),
                                tf.keras.layers.Dense(4, activation="softmax", name="head")])


with tf.distribute.Strategy(core).scope():
    split = make()
    split.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
history = split.fit(x, y, epochs=2, batch_size=25, verbose=0, shuffle=False)
reference = make()
reference.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
reference_history = reference.fit(x, y, epochs=2, batch_size=25, verbose=0, shuffle=False)
for a, b in zip(split.get_weights(), reference.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(history.history["loss"], reference_history.history["loss"], rtol=1e-6)
flat = np.concatenate([w.reshape(-1) for w in split.get_weights()]).astype(np.float64)
chief = flat.copy()
core.broadcast_from_chief(chief.view(np.uint8))
assert np.array_equal(chief, flat), "workers hold different weights"
print(f"worker {core.worker_index} of {core.num_workers}: OK")
