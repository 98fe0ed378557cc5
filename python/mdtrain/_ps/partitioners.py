"""tf.distribute.experimental.partitioners: how many axis-0 shards a variable is cut into.

A partitioner is called as TF calls it, `partitioner(shape, dtype)`, and returns the number of
partitions per axis (`[k, 1, ...]`). The arithmetic is TF's, done by the C++ engine (the same
functions the servers' layout uses). ParameterServerStrategy caps k at the number of servers
(a server holds at most one shard of a variable).
"""
import numpy as np

from mdtrain import _core


def _shape(shape):
    dims = [int(d) for d in (shape.as_list() if hasattr(shape, "as_list") else shape)]
    if not dims or any(d < 1 for d in dims):
        raise ValueError(f"a partitioned variable needs a shape of rank >= 1 with positive dimensions, got {dims}")
    return dims


def _dtype_name(dtype):
    name = getattr(dtype, "name", None) or np.dtype(dtype).name
    if name not in ("float32", "float64"):
        raise ValueError(f"parameter server variables must be float32 or float64, got {name}")
    return name


class Partitioner:
    def __call__(self, shape, dtype, axis=0):
        if axis != 0:
            raise ValueError(f"{type(self).__name__}: only axis 0 is partitioned, got axis={axis}")
        dims = _shape(shape)
        return [self._shards(dims, _dtype_name(dtype))] + [1] * (len(dims) - 1)


class FixedShardsPartitioner(Partitioner):
    """`num_shards` shards (fewer when the variable has fewer rows)."""

    def __init__(self, num_shards):
        if isinstance(num_shards, bool) or not isinstance(num_shards, (int, np.integer)) or num_shards < 1:
            raise ValueError(f"FixedShardsPartitioner: num_shards must be a positive integer, got {num_shards!r}")
        self._num_shards = int(num_shards)

    def _shards(self, dims, dtype):
        return _core.ps_fixed_shards(self._num_shards, dims)


class MinSizePartitioner(Partitioner):
    """As many shards as keep each at least `min_shard_bytes`, at most `max_shards`."""

    def __init__(self, min_shard_bytes=256 << 10, max_shards=1, bytes_per_string=16):
        if min_shard_bytes < 1:
            raise ValueError(f"MinSizePartitioner: min_shard_bytes must be >= 1, got {min_shard_bytes}")
        if max_shards < 1:
            raise ValueError(f"MinSizePartitioner: max_shards must be >= 1, got {max_shards}")
        self._min_shard_bytes, self._max_shards = int(min_shard_bytes), int(max_shards)

    def _shards(self, dims, dtype):
        return _core.ps_min_size_shards(dims, dtype, self._min_shard_bytes, self._max_shards)


class MaxSizePartitioner(Partitioner):
    """As few shards as keep each at most `max_shard_bytes` (capped by `max_shards`)."""

    def __init__(self, max_shard_bytes, max_shards=None, bytes_per_string=16):
        if max_shard_bytes < 1:
            raise ValueError(f"MaxSizePartitioner: max_shard_bytes must be >= 1, got {max_shard_bytes}")
        if max_shards is not None and max_shards < 1:
            raise ValueError(f"MaxSizePartitioner: max_shards must be >= 1, got {max_shards}")
        self._max_shard_bytes, self._max_shards = int(max_shard_bytes), max_shards

    def _shards(self, dims, dtype):
        return _core.ps_max_size_shards(dims, dtype, self._max_shard_bytes, self._max_shards)
