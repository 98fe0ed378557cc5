"""Worker 1 does not take part in training (it sleeps, then leaves): worker 0's first collective
must fail within the timeout, naming the rank that did not arrive and the operation."""
import sys
import time

import numpy as np

import mdtrain as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy(
    communication_options=tf.distribute.experimental.CommunicationOptions(timeout_seconds=2))
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))])
    model.compile(optimizer="sgd", loss="mse")
x = np.zeros((32, 4), "float32")
y = np.zeros((32, 3), "float32")
if strategy.cluster_resolver.task_id == 1:
    time.sleep(12)
    sys.exit(0)
start = time.monotonic()
try:
    model.fit(x, y, epochs=1, verbose=0)
except TimeoutError as e:
    print(f"TIMEOUT after {time.monotonic() - start:.1f}s: {e}", flush=True)
    sys.exit(3)
print("NO TIMEOUT", flush=True)
