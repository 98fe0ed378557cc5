"""The tutorial's main.py ("Multi-worker training with Keras"), which every worker runs. Import
changed to mdtrain.

Started by examples/tf_tutorials/multi_worker_with_keras.py through mpirun, each worker with its
own TF_CONFIG (mdtrain's workers talk over MPI; TF_CONFIG is checked against the launcher).
MDTRAIN_TUTORIAL_STEPS=<n> cuts the tutorial's 70 steps per epoch; MDTRAIN_TUTORIAL_DIR is where
files go (default /tmp). Each worker prints its figures as JSON after "RESULT" and writes them
to worker-<index>.json there.
"""
import os
import json

import mdtrain as tf
import numpy as np

import mnist_setup

STEPS = int(os.environ.get("MDTRAIN_TUTORIAL_STEPS", "70"))
WORK_DIR = os.environ.get("MDTRAIN_TUTORIAL_DIR", "/tmp")

per_worker_batch_size = 64
tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

with strategy.scope():
  # Model building/compiling need to be within `strategy.scope()`.
  multi_worker_model = mnist_setup.build_and_compile_cnn_model()

tf.keras.utils.set_random_seed(1)
history = multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=STEPS,
                                 verbose=2 if strategy.cluster_resolver.task_id == 0 else 0)
result = {"task": [strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id],
          "replicas": strategy.num_replicas_in_sync, "losses": history.history["loss"],
          "weights_sum": float(sum(np.sum(w, dtype=np.float64) for w in multi_worker_model.get_weights()))}

print("RESULT " + json.dumps(result), flush=True)
with open(os.path.join(WORK_DIR, f"worker-{strategy.cluster_resolver.task_id}.json"), "w") as f:
  json.dump(result, f)
