"""TensorFlow's tutorial "Distributed input" (tensorflow/docs,
site/en/tutorials/distribute/input.ipynb), cell by cell, with the import changed to mdtrain.

Changes from the tutorial, and why:
- `import mdtrain as tf`.
- The Keras preprocessing layer example (`tf.keras.layers.StringLookup` on string tensors) is
  skipped: mdtrain has no string tensors or string lookup layers (docs/differences.md).
- The generator example draws from a seeded NumPy generator so the output is reproducible.
- The figures the test checks are printed as JSON after "RESULT" at the end.
"""
import json

import mdtrain as tf

# Helper libraries
import numpy as np
import os

print(tf.__version__)

# Simulate multiple CPUs with virtual devices
N_VIRTUAL_DEVICES = 2
physical_devices = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    physical_devices[0], [tf.config.LogicalDeviceConfiguration() for _ in range(N_VIRTUAL_DEVICES)])

print("Available devices:")
for i, device in enumerate(tf.config.list_logical_devices()):
  print("%d) %s" % (i, device))

result = {}

# ## Distributed datasets
global_batch_size = 16
# Create a tf.data.Dataset object.
dataset = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(100).batch(global_batch_size)

@tf.function
def train_step(inputs):
  features, labels = inputs
  return labels - 0.3 * features

# Iterate over the dataset using the for..in construct.
for inputs in dataset:
  print(train_step(inputs))
result["plain_last"] = np.asarray(train_step(inputs)).tolist()

# ### tf.distribute.Strategy.experimental_distribute_dataset
global_batch_size = 16
mirrored_strategy = tf.distribute.MirroredStrategy()

dataset = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(100).batch(global_batch_size)
# Distribute input using the `experimental_distribute_dataset`.
dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
# 1 global batch of data fed to the model in 1 step.
print(next(iter(dist_dataset)))
first = next(iter(dist_dataset))
result["first_batch_replica_rows"] = [len(v) for v in mirrored_strategy.experimental_local_results(first[0])]

# Sharding
dataset = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(64).batch(16)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = dataset.with_options(options)

# ### tf.distribute.Strategy.distribute_datasets_from_function
mirrored_strategy = tf.distribute.MirroredStrategy()

def dataset_fn(input_context):
  batch_size = input_context.get_per_replica_batch_size(global_batch_size)
  dataset = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(64).batch(16)
  dataset = dataset.shard(
      input_context.num_input_pipelines, input_context.input_pipeline_id)
  dataset = dataset.batch(batch_size)
  dataset = dataset.prefetch(2)  # This prefetches 2 batches per device.
  return dataset

dist_dataset = mirrored_strategy.distribute_datasets_from_function(dataset_fn)

# ## Distributed iterators
# ### Use a Pythonic for loop construct
global_batch_size = 16
mirrored_strategy = tf.distribute.MirroredStrategy()

dataset = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(100).batch(global_batch_size)
dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

@tf.function
def train_step(inputs):
  features, labels = inputs
  return labels - 0.3 * features

steps = 0
for x in dist_dataset:
  # train_step trains the model using the dataset elements
  loss = mirrored_strategy.run(train_step, args=(x,))
  print("Loss is ", loss)
  steps += 1
result["for_loop_steps"] = steps

# ### Use iter to create an explicit iterator
num_epochs = 10
steps_per_epoch = 5
for epoch in range(num_epochs):
  dist_iterator = iter(dist_dataset)
  for step in range(steps_per_epoch):
    # train_step trains the model using the dataset elements
    loss = mirrored_strategy.run(train_step, args=(next(dist_iterator),))
    # which is the same as
    # loss = mirrored_strategy.run(train_step, args=(dist_iterator.get_next(),))
    print("Loss is ", loss)

# You can break the loop with get_next_as_optional by checking if the Optional contains a value
global_batch_size = 4
steps_per_loop = 5
strategy = tf.distribute.MirroredStrategy()

dataset = tf.data.Dataset.range(9).batch(global_batch_size)
distributed_iterator = iter(strategy.experimental_distribute_dataset(dataset))

seen = []

@tf.function
def train_fn(distributed_iterator):
  for _ in tf.range(steps_per_loop):
    optional_data = distributed_iterator.get_next_as_optional()
    if not optional_data.has_value():
      break
    per_replica_results = strategy.run(lambda x: x, args=(optional_data.get_value(),))
    tf.print(strategy.experimental_local_results(per_replica_results))
    seen.append([np.asarray(v).tolist() for v in strategy.experimental_local_results(per_replica_results)])
train_fn(distributed_iterator)
result["optional_batches"] = seen

# ## Using the element_spec property
global_batch_size = 16
epochs = 5
steps_per_epoch = 5
mirrored_strategy = tf.distribute.MirroredStrategy()

dataset = tf.data.Dataset.from_tensors(([1.], [1.])).repeat(100).batch(global_batch_size)
dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

@tf.function(input_signature=[dist_dataset.element_spec])
def train_step(per_replica_inputs):
  def step_fn(inputs):
    return 2 * inputs

  return mirrored_strategy.run(step_fn, args=(per_replica_inputs,))

for _ in range(epochs):
  iterator = iter(dist_dataset)
  for _ in range(steps_per_epoch):
    output = train_step(next(iterator))
    tf.print(output)
result["element_spec_calls"] = train_step.experimental_get_tracing_count()

# ## Data preprocessing
# ### Preprocessing with a custom training loop
# Skipped: tf.keras.layers.StringLookup over a dataset of strings. mdtrain has no string tensors
# and no string preprocessing layers (docs/differences.md).

# ## Caveats: ordering outputs
mirrored_strategy = tf.distribute.MirroredStrategy()
dataset_size = 24
batch_size = 6
dataset = tf.data.Dataset.range(dataset_size).enumerate().batch(batch_size)
dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

def predict(index, inputs):
  outputs = 2 * inputs
  return index, outputs

result_dict = {}
for index, inputs in dist_dataset:
  output_index, outputs = mirrored_strategy.run(predict, args=(index, inputs))
  indices = list(mirrored_strategy.experimental_local_results(output_index))
  rindices = []
  for a in indices:
    rindices.extend(a.numpy())
  outputs = list(mirrored_strategy.experimental_local_results(outputs))
  routputs = []
  for a in outputs:
    routputs.extend(a.numpy())
  for i, value in zip(rindices, routputs):
    result_dict[i] = value

print(result_dict)
result["ordered"] = {int(k): int(v) for k, v in result_dict.items()}

# ## Tensor inputs instead of tf.data
# ### Use experimental_distribute_values_from_function for arbitrary tensor inputs
mirrored_strategy = tf.distribute.MirroredStrategy()

def value_fn(ctx):
  return tf.constant(ctx.replica_id_in_sync_group)

distributed_values = mirrored_strategy.experimental_distribute_values_from_function(value_fn)
for _ in range(4):
  result_values = mirrored_strategy.run(lambda x: x, args=(distributed_values,))
  print(result_values)
result["value_fn"] = [int(v) for v in mirrored_strategy.experimental_local_results(result_values)]

# ### Use tf.data.Dataset.from_generator if your input is from a generator
mirrored_strategy = tf.distribute.MirroredStrategy()
rng = np.random.default_rng(0)
def input_gen():
  while True:
    yield rng.random(4)

# use Dataset.from_generator
dataset = tf.data.Dataset.from_generator(
    input_gen, output_types=(tf.float32), output_shapes=tf.TensorShape([4]))
dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
iterator = iter(dist_dataset)
for _ in range(4):
  result_gen = mirrored_strategy.run(lambda x: x, args=(next(iterator),))
  print(result_gen)
result["generator_shapes"] = [list(np.shape(v)) for v in mirrored_strategy.experimental_local_results(result_gen)]

print("RESULT " + json.dumps(result))
