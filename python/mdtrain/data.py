"""tf.data: input pipelines (the C++-backed Dataset lands with the MirroredStrategy issue)."""
