"""TensorFlow's tutorial "Save and load a model using a distribution strategy" (tensorflow/docs,
site/en/tutorials/distribute/save_and_load.ipynb), step by step, with the import changed to
mdtrain.

Changes from the tutorial, and why:
- `import mdtrain as tf`.
- `tfds.load('mnist')` becomes `tf.keras.datasets.fashion_mnist.load_data()` wrapped in
  `tf.data.Dataset.from_tensor_slices` (no TensorFlow Datasets, no download).
- Data and epochs are cut (MDTRAIN_TUTORIAL_FULL=1: all 60,000 images) so the script runs in
  seconds on 2 CPU cores; files go to a temporary directory.
- The Keras API part saves to "keras_save.keras" (Keras 3 needs the extension; the tutorial's
  older text saves a SavedModel directory).
- "The tf.saved_model APIs" part (tf.saved_model.save / load, the "serving_default" signature,
  hub.KerasLayer) is skipped: mdtrain does not write or read TF SavedModel directories, which
  hold TensorFlow graphs (docs/differences.md). The same steps are done with the Keras file:
  inference with the loaded model, also under a strategy.
- The caveat about a subclassed model without defined inputs is skipped: its point is that the
  Keras API cannot save it and tf.saved_model must be used, which mdtrain does not have.
- The figures the test checks are printed as JSON after "RESULT" at the end.
"""
import json
import os
import tempfile

import numpy as np

import mdtrain as tf

FULL = os.environ.get("MDTRAIN_TUTORIAL_FULL") == "1"
work_dir = tempfile.mkdtemp(prefix="save_and_load_")

# ## Prepare the data and model using tf.distribute.Strategy
mirrored_strategy = tf.distribute.MirroredStrategy()

def get_data():
  (x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
  if not FULL:
    x_train, y_train, x_test, y_test = x_train[:4096], y_train[:4096], x_test[:1024], y_test[:1024]
  mnist_train = tf.data.Dataset.from_tensor_slices((x_train[..., None], y_train))
  mnist_test = tf.data.Dataset.from_tensor_slices((x_test[..., None], y_test))

  BUFFER_SIZE = 10000

  BATCH_SIZE_PER_REPLICA = 64
  BATCH_SIZE = BATCH_SIZE_PER_REPLICA * mirrored_strategy.num_replicas_in_sync

  def scale(image, label):
    image = tf.cast(image, tf.float32)
    image /= 255

    return image, label

  train_dataset = mnist_train.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)
  eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE)

  return train_dataset, eval_dataset

def get_model():
  with mirrored_strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, 3, activation='relu', input_shape=(28, 28, 1)),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation='relu'),
        tf.keras.layers.Dense(10)
    ])

    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.Adam(),
                  metrics=[tf.metrics.SparseCategoricalAccuracy()])
    return model

# Train the model:
model = get_model()
train_dataset, eval_dataset = get_data()
model.fit(train_dataset, epochs=2, verbose=2)
saved_eval = model.evaluate(eval_dataset, verbose=0)

# ## Save and load the model
# ### The Keras API
keras_model_path = os.path.join(work_dir, "keras_save.keras")
model.save(keras_model_path)

# Restore the model without tf.distribute.Strategy:
restored_keras_model = tf.keras.models.load_model(keras_model_path)
restored_eval = restored_keras_model.evaluate(eval_dataset, verbose=0)
restored_history = restored_keras_model.fit(train_dataset, epochs=2, verbose=2)

# Load the model and train it using a tf.distribute.Strategy:
another_strategy = tf.distribute.OneDeviceStrategy('/cpu:0')
with another_strategy.scope():
  restored_keras_model_ds = tf.keras.models.load_model(keras_model_path)
  restored_ds_eval = restored_keras_model_ds.evaluate(eval_dataset, verbose=0)
  restored_ds_history = restored_keras_model_ds.fit(train_dataset, epochs=2, verbose=2)

# ### The tf.saved_model API
# Skipped: tf.saved_model.save(model, path), tf.saved_model.load(path) and
# loaded.signatures["serving_default"] need TF SavedModel directories (TensorFlow graphs), which
# mdtrain neither writes nor reads. The tutorial's inference steps, with the Keras file instead:
predict_dataset = eval_dataset.map(lambda image, label: image)
loaded = tf.keras.models.load_model(keras_model_path)
for batch in predict_dataset.take(1):
  print(loaded(batch))
first_logits = np.asarray(loaded(next(iter(predict_dataset))))

# Inference in a distributed manner:
another_strategy = tf.distribute.MirroredStrategy()
with another_strategy.scope():
  loaded = tf.keras.models.load_model(keras_model_path)

  dist_predict_dataset = another_strategy.experimental_distribute_dataset(
      predict_dataset)

  # Calling the function in a distributed manner
  distributed_logits = []
  for batch in dist_predict_dataset:
    result = another_strategy.run(loaded, args=(batch,))
    distributed_logits.extend(np.asarray(r) for r in another_strategy.experimental_local_results(result))
distributed_first = np.concatenate(distributed_logits)[:len(first_logits)]

print("RESULT " + json.dumps({
    "replicas": mirrored_strategy.num_replicas_in_sync, "saved_eval": saved_eval, "restored_eval": restored_eval,
    "restored_ds_eval": restored_ds_eval, "restored_losses": restored_history.history["loss"],
    "restored_ds_losses": restored_ds_history.history["loss"],
    "distributed_inference_matches": bool(np.allclose(first_logits, distributed_first, rtol=1e-5, atol=1e-5))}))
