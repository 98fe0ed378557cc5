"""One worker of a 2-worker job misbehaves; the other must find out at once, not after its timeout.

    --raise       worker 1 raises ValueError in a callback at the end of its first epoch
    --batch-size  worker 1 uses another batch size than worker 0
    --hang        worker 1 never joins training (sleeps 120 s); worker 0 times out after 2 s and
                  must then exit at once, not wait for worker 1 at exit (MPI_Finalize)

A worker whose fit raises prints "FAILED on worker <rank> after <s>s: <type>: <message>" and exits 3."""
import argparse
import sys
import time

import numpy as np

import mdtrain as tf

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["raise", "batch-size", "hang"])
args = parser.parse_args()

timeout = 2 if args.mode == "hang" else 60
strategy = tf.distribute.MultiWorkerMirroredStrategy(
    communication_options=tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout))
rank = strategy.cluster_resolver.task_id
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))])
    model.compile(optimizer="sgd", loss="mse")
x = np.zeros((256, 4), "float32")
y = np.zeros((256, 3), "float32")


class RaiseOnWorker1(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if rank == 1:
            raise ValueError("boom from a callback")


callbacks = [RaiseOnWorker1()] if args.mode == "raise" else []
batch_size = 64 if args.mode == "batch-size" and rank == 1 else 32
if args.mode == "hang" and rank == 1:
    time.sleep(120)
    sys.exit(0)
start = time.monotonic()
try:
    model.fit(x, y, epochs=5, batch_size=batch_size, verbose=0, callbacks=callbacks)
except Exception as e:
    # One write of the whole line: mpirun forwards each write of each worker as it comes, so a
    # print's text and its newline (two writes) could interleave with the other worker's line.
    sys.stdout.write(f"FAILED on worker {rank} after {time.monotonic() - start:.1f}s: {type(e).__name__}: {e}\n")
    sys.stdout.flush()
    sys.exit(3)
print("NO FAILURE", flush=True)
