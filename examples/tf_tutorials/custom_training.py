"""TensorFlow's tutorial "Custom training with tf.distribute.Strategy"
(tensorflow/docs, site/en/tutorials/distribute/custom_training.ipynb), step by step, with the
import changed to mdtrain.

Changes from the tutorial, and why:
- `import mdtrain as tf`.
- The data set is cut (MDTRAIN_TUTORIAL_FULL=1 runs the tutorial's sizes: all 60,000 images,
  10 epochs) so the script runs in seconds on 2 CPU cores.
- MirroredStrategy() takes every logical CPU device (MDTRAIN_NUM_CPU_DEVICES=2 gives two
  replicas on one CPU, as TF's virtual devices do).
- The checkpoint directory is a temporary directory instead of ./training_checkpoints.
- The last line prints the figures the test compares (JSON after "RESULT").

Everything else is the tutorial's code: the regularized CNN, `strategy.run` under `tf.function`,
loss scaling with `tf.nn.compute_average_loss`, Keras metrics updated inside the replica step,
`tf.train.Checkpoint`, restoring without a strategy, and the two other ways of iterating.
"""
import json
import os
import tempfile

# Import TensorFlow
import mdtrain as tf

# Helper libraries
import numpy as np

print(tf.__version__)

FULL = os.environ.get("MDTRAIN_TUTORIAL_FULL") == "1"

# ## Download the Fashion MNIST dataset
fashion_mnist = tf.keras.datasets.fashion_mnist

(train_images, train_labels), (test_images, test_labels) = fashion_mnist.load_data()
if not FULL:
    train_images, train_labels = train_images[:2048], train_labels[:2048]
    test_images, test_labels = test_images[:256], test_labels[:256]

# Add a dimension to the array -> new shape == (28, 28, 1)
# This is done because the first layer in our model is a convolutional
# layer and it requires a 4D input (batch_size, height, width, channels).
# batch_size dimension will be added later on.
train_images = train_images[..., None]
test_images = test_images[..., None]

# Scale the images to the [0, 1] range.
train_images = train_images / np.float32(255)
test_images = test_images / np.float32(255)

# ## Create a strategy to distribute the variables and the graph
# If the list of devices is not specified in
# `tf.distribute.MirroredStrategy` constructor, they will be auto-detected.
strategy = tf.distribute.MirroredStrategy()

print('Number of devices: {}'.format(strategy.num_replicas_in_sync))

# ## Setup input pipeline
BUFFER_SIZE = len(train_images)

BATCH_SIZE_PER_REPLICA = 64
GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync

EPOCHS = 10 if FULL else 3

train_dataset = tf.data.Dataset.from_tensor_slices((train_images, train_labels)).shuffle(BUFFER_SIZE).batch(GLOBAL_BATCH_SIZE)
test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(GLOBAL_BATCH_SIZE)

train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)


# ## Create the model
def create_model():
  regularizer = tf.keras.regularizers.L2(1e-5)
  model = tf.keras.Sequential([
      tf.keras.layers.Conv2D(32, 3,
                             activation='relu',
                             kernel_regularizer=regularizer),
      tf.keras.layers.MaxPooling2D(),
      tf.keras.layers.Conv2D(64, 3,
                             activation='relu',
                             kernel_regularizer=regularizer),
      tf.keras.layers.MaxPooling2D(),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(64,
                            activation='relu',
                            kernel_regularizer=regularizer),
      tf.keras.layers.Dense(10, kernel_regularizer=regularizer)
    ])

  return model


# Create a checkpoint directory to store the checkpoints.
checkpoint_dir = tempfile.mkdtemp(prefix="training_checkpoints_")
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")

# ## Define the loss function
with strategy.scope():
  # Set reduction to `NONE` so you can do the reduction yourself.
  loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
      from_logits=True,
      reduction=tf.keras.losses.Reduction.NONE)
  def compute_loss(labels, predictions, model_losses):
    per_example_loss = loss_object(labels, predictions)
    loss = tf.nn.compute_average_loss(per_example_loss)
    if model_losses:
      loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
    return loss

# ## Define the metrics to track loss and accuracy
with strategy.scope():
  test_loss = tf.keras.metrics.Mean(name='test_loss')

  train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(
      name='train_accuracy')
  test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(
      name='test_accuracy')

# ## Training loop
# A model, an optimizer, and a checkpoint must be created under `strategy.scope`.
with strategy.scope():
  model = create_model()

  optimizer = tf.keras.optimizers.Adam()

  checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model)


def train_step(inputs):
  images, labels = inputs

  with tf.GradientTape() as tape:
    predictions = model(images, training=True)
    loss = compute_loss(labels, predictions, model.losses)

  gradients = tape.gradient(loss, model.trainable_variables)
  optimizer.apply_gradients(zip(gradients, model.trainable_variables))

  train_accuracy.update_state(labels, predictions)
  return loss

def test_step(inputs):
  images, labels = inputs

  predictions = model(images, training=False)
  t_loss = loss_object(labels, predictions)

  test_loss.update_state(t_loss)
  test_accuracy.update_state(labels, predictions)


# `run` replicates the provided computation and runs it
# with the distributed input.
@tf.function
def distributed_train_step(dataset_inputs):
  per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
  return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses,
                         axis=None)

@tf.function
def distributed_test_step(dataset_inputs):
  return strategy.run(test_step, args=(dataset_inputs,))

losses, test_accuracies = [], []
for epoch in range(EPOCHS):
  # TRAIN LOOP
  total_loss = 0.0
  num_batches = 0
  for x in train_dist_dataset:
    total_loss += distributed_train_step(x)
    num_batches += 1
  train_loss = total_loss / num_batches

  # TEST LOOP
  for x in test_dist_dataset:
    distributed_test_step(x)

  if epoch % 2 == 0:
    checkpoint.save(checkpoint_prefix)

  template = ("Epoch {}, Loss: {}, Accuracy: {}, Test Loss: {}, "
              "Test Accuracy: {}")
  print(template.format(epoch + 1, train_loss,
                         train_accuracy.result() * 100, test_loss.result(),
                         test_accuracy.result() * 100))
  losses.append(float(train_loss))
  test_accuracies.append(float(test_accuracy.result()))

  test_loss.reset_state()
  train_accuracy.reset_state()
  test_accuracy.reset_state()

# ## Restore the latest checkpoint and test
# A model checkpointed with a `tf.distribute.Strategy` can be restored with or without a strategy.
eval_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(
      name='eval_accuracy')

new_model = create_model()
new_optimizer = tf.keras.optimizers.Adam()

test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(GLOBAL_BATCH_SIZE)


@tf.function
def eval_step(images, labels):
  predictions = new_model(images, training=False)
  eval_accuracy(labels, predictions)


checkpoint = tf.train.Checkpoint(optimizer=new_optimizer, model=new_model)
checkpoint.restore(tf.train.latest_checkpoint(checkpoint_dir))

for images, labels in test_dataset:
  eval_step(images, labels)

print('Accuracy after restoring the saved model without strategy: {}'.format(
    eval_accuracy.result() * 100))
restored_accuracy = float(eval_accuracy.result())

# The checkpoint restored is the one saved after the last even epoch (epoch % 2 == 0). Its
# accuracy, measured with the model that wrote it as it was then, is the test's reference: the
# tutorial says the model "can be restored with or without a strategy".
saved_epoch = max(e for e in range(EPOCHS) if e % 2 == 0)

# ## Alternate ways of iterating over a dataset
# ### Using iterators
for _ in range(EPOCHS):
  total_loss = 0.0
  num_batches = 0
  train_iter = iter(train_dist_dataset)

  for _ in range(10):
    total_loss += distributed_train_step(next(train_iter))
    num_batches += 1
  average_train_loss = total_loss / num_batches

  template = ("Epoch {}, Loss: {}, Accuracy: {}")
  print(template.format(epoch + 1, average_train_loss, train_accuracy.result() * 100))
  train_accuracy.reset_state()


# ### Iterating inside a `tf.function`
@tf.function
def distributed_train_epoch(dataset):
  total_loss = 0.0
  num_batches = 0
  for x in dataset:
    per_replica_losses = strategy.run(train_step, args=(x,))
    total_loss += strategy.reduce(
      tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)
    num_batches += 1
  return total_loss / tf.cast(num_batches, dtype=tf.float32)

epoch_losses = []
for epoch in range(EPOCHS):
  train_loss = distributed_train_epoch(train_dist_dataset)

  template = ("Epoch {}, Loss: {}, Accuracy: {}")
  print(template.format(epoch + 1, train_loss, train_accuracy.result() * 100))
  epoch_losses.append(float(train_loss))

  train_accuracy.reset_state()

print("RESULT " + json.dumps({"replicas": strategy.num_replicas_in_sync, "losses": losses,
                              "epoch_losses": epoch_losses, "restored_accuracy": restored_accuracy,
                              "test_accuracies": test_accuracies,
                              "checkpoint": tf.train.latest_checkpoint(checkpoint_dir),
                              "saved_epoch": saved_epoch}))
