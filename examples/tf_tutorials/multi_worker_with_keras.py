"""TensorFlow's tutorial "Multi-worker training with Keras" (tensorflow/docs,
site/en/tutorials/distribute/multi_worker_with_keras.ipynb), with the import changed to mdtrain.

The tutorial writes mnist_setup.py and main.py and starts main.py twice in the background, each
process with its own TF_CONFIG; TensorFlow's workers then find each other over gRPC. mdtrain's
workers talk over MPI, so this script starts the same two workers with mpirun, giving each its
own TF_CONFIG (the tutorial's, index 0 and 1), which mdtrain checks against MPI's ranks. The
worker program is multi_worker_main.py, the tutorial's main.py. The dataset-sharding and
fault-tolerance cells (saving and loading the model, checkpoints, BackupAndRestore) run in the
notebook's own process in the tutorial, and in this script's here.

Changes from the tutorial, and why:
- `import mdtrain as tf`; MNIST is Fashion-MNIST (ships with the system, no download).
- Data and steps are cut (MDTRAIN_TUTORIAL_FULL=1 runs the tutorial's 70 steps per epoch on the
  whole data set) so the job runs in well under a minute on 2 CPU cores.
- No GRPC ports: the cluster's addresses in TF_CONFIG are the tutorial's and are not used.
- Files go to a temporary directory instead of /tmp.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FULL = os.environ.get("MDTRAIN_TUTORIAL_FULL") == "1"
if not FULL:
  os.environ.setdefault("MDTRAIN_TUTORIAL_LIMIT", "4096")
  os.environ.setdefault("MDTRAIN_TUTORIAL_STEPS", "10")

os.environ.pop('TF_CONFIG', None)
if HERE not in sys.path:
  sys.path.insert(0, HERE)

import mdtrain as tf

# ## Model training on a single worker
import mnist_setup

batch_size = 64
single_worker_dataset = mnist_setup.mnist_dataset(batch_size)
single_worker_model = mnist_setup.build_and_compile_cnn_model()
steps = int(os.environ.get("MDTRAIN_TUTORIAL_STEPS", "70"))
single_history = single_worker_model.fit(single_worker_dataset, epochs=3, steps_per_epoch=steps, verbose=2)

# ## Multi-worker configuration
tf_config = {
    'cluster': {
        'worker': ['localhost:12345', 'localhost:23456']
    },
    'task': {'type': 'worker', 'index': 0}
}
print(json.dumps(tf_config))

# ## Launch the workers: one TF_CONFIG each, as the tutorial's two background processes have.
work_dir = tempfile.mkdtemp(prefix="multi_worker_")
worker_configs = []
for index in range(len(tf_config['cluster']['worker'])):
  tf_config['task']['index'] = index
  worker_configs.append(json.dumps(tf_config))

mpirun = shutil.which("mpirun")
if mpirun is None:
  sys.exit("mpirun not found: install Open MPI (scripts/system_deps.sh) to run the workers")
command = [mpirun, "--oversubscribe", "--bind-to", "none"]
if hasattr(os, "geteuid") and os.geteuid() == 0:
  command.append("--allow-run-as-root")
env = dict(os.environ, MDTRAIN_TUTORIAL_DIR=work_dir)
for name in ("PYTHONPATH", "MDTRAIN_TUTORIAL_LIMIT", "MDTRAIN_TUTORIAL_STEPS", "MDTRAIN_TUTORIAL_DIR",
             "MDTRAIN_DATA"):
  if name in env:
    command += ["-x", name]
for i, config in enumerate(worker_configs):
  if i:
    command.append(":")
  # Open MPI's multiple-program form: worker i gets its own TF_CONFIG.
  command += ["-n", "1", "-x", f"TF_CONFIG={config}", sys.executable, os.path.join(HERE, "multi_worker_main.py")]
job = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
print(job.stdout)
if job.returncode != 0:
  print(job.stderr, file=sys.stderr)
  sys.exit(f"the workers failed (exit status {job.returncode})")
workers = []
for index in range(len(worker_configs)):
  with open(os.path.join(work_dir, f"worker-{index}.json")) as f:
    workers.append(json.load(f))

# ## Back in the notebook: its own (single-worker) strategy and model, as the tutorial creates them
# before writing main.py; the fault-tolerance cells below run here, as in the tutorial.
WORK_DIR = work_dir
STEPS = steps
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
  multi_worker_model = mnist_setup.build_and_compile_cnn_model()
multi_worker_dataset = mnist_setup.mnist_dataset(64)
result = {}

# ## Dataset sharding
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF

global_batch_size = 64
multi_worker_dataset = mnist_setup.mnist_dataset(batch_size=64)
dataset_no_auto_shard = multi_worker_dataset.with_options(options)

# ## Fault tolerance
# ### Model saving and loading
model_path = os.path.join(WORK_DIR, 'keras-model.keras')

def _is_chief(task_type, task_id):
  # Note: there are two possible `TF_CONFIG` configurations.
  #   1) In addition to `worker` tasks, a `chief` task type is use;
  #      in this case, this function should be modified to
  #      `return task_type == 'chief'`.
  #   2) Only `worker` task type is used; in this case, worker 0 is
  #      regarded as the chief. The implementation demonstrated here
  #      is for this case.
  # For the purpose of this Colab section, the `task_type` is `None` case
  # is added because it is effectively run with only a single worker.
  return (task_type == 'worker' and task_id == 0) or task_type is None

def _get_temp_dir(dirpath, task_id):
  base_dirpath = 'workertemp_' + str(task_id)
  temp_dir = os.path.join(dirpath, base_dirpath)
  tf.io.gfile.makedirs(temp_dir)
  return temp_dir

def write_filepath(filepath, task_type, task_id):
  dirpath = os.path.dirname(filepath)
  base = os.path.basename(filepath)
  if not _is_chief(task_type, task_id):
    dirpath = _get_temp_dir(dirpath, task_id)
  return os.path.join(dirpath, base)

task_type, task_id = (strategy.cluster_resolver.task_type,
                      strategy.cluster_resolver.task_id)
write_model_path = write_filepath(model_path, task_type, task_id)

multi_worker_model.save(write_model_path)

if not _is_chief(task_type, task_id):
  tf.io.gfile.rmtree(os.path.dirname(write_model_path))

loaded_model = tf.keras.models.load_model(model_path)

# Now that the model is restored, and can continue with the training.
loaded_history = loaded_model.fit(multi_worker_dataset, epochs=2, steps_per_epoch=20, verbose=0)
result["loaded_losses"] = loaded_history.history["loss"]

# ### Checkpoint saving and restoring
checkpoint_dir = os.path.join(WORK_DIR, 'ckpt')

checkpoint = tf.train.Checkpoint(model=multi_worker_model)
write_checkpoint_dir = write_filepath(checkpoint_dir, task_type, task_id)
checkpoint_manager = tf.train.CheckpointManager(
    checkpoint, directory=write_checkpoint_dir, max_to_keep=1)

checkpoint_manager.save()
if not _is_chief(task_type, task_id):
  tf.io.gfile.rmtree(write_checkpoint_dir)

latest_checkpoint = tf.train.latest_checkpoint(checkpoint_dir)
checkpoint.restore(latest_checkpoint)
restored_history = multi_worker_model.fit(multi_worker_dataset, epochs=2, steps_per_epoch=20, verbose=0)
result["restored_losses"] = restored_history.history["loss"]
result["checkpoint"] = os.path.basename(latest_checkpoint)

# ### BackupAndRestore callback
# Multi-worker training with `MultiWorkerMirroredStrategy`
# and the `BackupAndRestore` callback.
callbacks = [tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join(WORK_DIR, 'backup'))]
with strategy.scope():
  multi_worker_model = mnist_setup.build_and_compile_cnn_model()
backup_history = multi_worker_model.fit(multi_worker_dataset,
                                        epochs=3,
                                        steps_per_epoch=STEPS,
                                        callbacks=callbacks, verbose=0)
result["backup_losses"] = backup_history.history["loss"]
result["files"] = sorted(os.listdir(WORK_DIR))



result.update(single_worker_losses=single_history.history["loss"], workers=workers)
print("RESULT " + json.dumps(result))
