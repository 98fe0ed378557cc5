"""tf.compat: the parts of TF 1's API that TF 2 programs still reach for (tf.compat.v1)."""
from mdtrain.compat import v1

__all__ = ["v1"]
