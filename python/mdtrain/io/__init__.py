"""tf.io: gfile over the local file system."""
from mdtrain.io import gfile

__all__ = ["gfile"]
