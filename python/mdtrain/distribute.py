"""tf.distribute: strategies that place replicas on devices.

``with strategy.scope():`` makes the strategy current: models, optimizers and metrics created or
compiled inside belong to it. A model built outside any scope and compiled inside one is
mirrored by that strategy (Keras 3 would silently train it on one device). Training a model
under a scope of another strategy than the one it was compiled for is a ValueError.
"""
import contextlib
import enum
import logging
import threading

from mdtrain import _core
from mdtrain import config as _config

_log = logging.getLogger("mdtrain")


class ReduceOp(enum.Enum):
    SUM = "SUM"
    MEAN = "MEAN"


class _ScopeState(threading.local):
    def __init__(self):
        self.stack = []
        self.replica = None  # (strategy, replica id) while strategy.run calls fn
        self.deferred = None  # the _DeferredStep collecting model.train_step calls in strategy.run


class PerReplica:
    """One value per replica (what strategy.run returns and experimental_distribute_dataset yields)."""

    def __init__(self, values):
        self.values = tuple(values)

    def __repr__(self):
        return f"PerReplica({list(self.values)!r})"


def _map_structure(fn, structure):
    if isinstance(structure, PerReplica):
        return fn(structure)
    if isinstance(structure, tuple):
        return tuple(_map_structure(fn, s) for s in structure)
    if isinstance(structure, list):
        return [_map_structure(fn, s) for s in structure]
    if isinstance(structure, dict):
        return {k: _map_structure(fn, v) for k, v in structure.items()}
    return fn(structure)


class _ReplicaContext:
    def __init__(self, strategy, replica_id):
        self.strategy = strategy
        self.replica_id_in_sync_group = replica_id
        self.num_replicas_in_sync = strategy.num_replicas_in_sync


def get_replica_context():
    """The replica context inside strategy.run, else None (TF returns a default context outside)."""
    r = _scopes.replica
    return None if r is None else _ReplicaContext(*r)


class _DeferredStep:
    """Collects each replica's share of a model's train step inside strategy.run, then runs the
    synchronized step once, in C++, for all replicas together."""

    def __init__(self):
        self.models = {}  # id(model) -> (model, {replica: (x, y)}, {replica: _DeferredValue})

    def add(self, model, replica, x, y):
        entry = self.models.setdefault(id(model), (model, {}, {}))
        if replica in entry[1]:
            raise RuntimeError("model.train_step may be called once per replica in one strategy.run")
        entry[1][replica] = (x, y)
        value = _DeferredValue()
        entry[2][replica] = value
        return value

    def run(self, num_replicas):
        import numpy as np

        for model, data, values in self.models.values():
            if sorted(data) != list(range(num_replicas)):
                raise RuntimeError("model.train_step must be called on every replica in strategy.run")
            xs = [data[r][0] for r in range(num_replicas)]
            ys = [data[r][1] for r in range(num_replicas)]
            model.train_on_batch(np.concatenate(xs), np.concatenate(ys))
            # The engine cuts the global batch like experimental_distribute_dataset did (contiguous,
            # sizes differing by at most one), so replica r's loss is the loss of xs[r].
            for r, loss in enumerate(model._core.replica_losses()):
                values[r].value = loss


class _DeferredValue:
    value = None


_scopes = _ScopeState()
_default_strategy = None


class Strategy:
    """Base of all strategies; wraps the C++ strategy that runs the replicas."""

    def __init__(self, core):
        self._core = core

    @property
    def num_replicas_in_sync(self):
        return self._core.num_replicas_in_sync

    @property
    def extended(self):
        return self

    @property
    def worker_devices(self):
        return tuple(self._core.devices)

    @contextlib.contextmanager
    def scope(self):
        current = _scopes.stack[-1] if _scopes.stack else None
        if current is not None and current is not self:
            raise ValueError(
                f"Mixing different tf.distribute.Strategy objects: a {type(self).__name__} scope was "
                f"entered inside the scope of a {type(current).__name__}"
            )
        _scopes.stack.append(self)
        try:
            yield self
        finally:
            _scopes.stack.pop()

    def __repr__(self):
        return f"<{type(self).__name__} devices={list(self._core.devices)}>"

    # ---- custom training loops ------------------------------------------------------------
    def experimental_distribute_dataset(self, dataset, options=None):
        """Yields each global batch of `dataset` cut into per-replica slices (PerReplica values)."""
        return DistributedDataset(dataset, self)

    def run(self, fn, args=(), kwargs=None):
        """Calls fn once per replica with that replica's values of args (PerReplica unpacked).

        Inside fn, ``model.train_step((x, y))`` contributes this replica's slice; the step runs
        once for all replicas when every replica has called it, and the returned value becomes
        that replica's loss (sum of its losses / global batch, as TF's compute_average_loss)."""
        kwargs = kwargs or {}
        n = self.num_replicas_in_sync
        deferred = _DeferredStep()
        results = []
        with self.scope():
            for r in range(n):
                pick = lambda v, r=r: v.values[r] if isinstance(v, PerReplica) else v  # noqa: E731
                _scopes.replica = (self, r)
                _scopes.deferred = deferred
                try:
                    results.append(fn(*_map_structure(pick, tuple(args)), **_map_structure(pick, kwargs)))
                finally:
                    _scopes.replica = None
                    _scopes.deferred = None
            deferred.run(n)
        resolve = lambda v: v.value if isinstance(v, _DeferredValue) else v  # noqa: E731
        results = [_map_structure(resolve, r) for r in results]
        return results[0] if n == 1 else PerReplica(results)

    def reduce(self, reduce_op, value, axis=None):
        """Sum or mean of a PerReplica value over replicas (axis: also reduce that axis of each)."""
        import numpy as np

        op = ReduceOp(reduce_op.value if isinstance(reduce_op, ReduceOp) else str(reduce_op).upper())
        values = value.values if isinstance(value, PerReplica) else (value,)
        arrays = [np.asarray(v, dtype=np.float64) for v in values]
        if axis is not None:
            total = sum(a.sum(axis=axis) for a in arrays)
            count = sum(a.shape[axis] for a in arrays)
            return total / count if op is ReduceOp.MEAN else total
        total = sum(arrays)
        return total / len(arrays) if op is ReduceOp.MEAN else total


class OneDeviceStrategy(Strategy):
    """One replica on one device (tf.distribute.OneDeviceStrategy)."""

    def __init__(self, device="/cpu:0"):
        _check_devices_exist([device])
        super().__init__(_core.OneDeviceStrategy(device))


class _DefaultStrategy(OneDeviceStrategy):
    """What get_strategy() returns outside any scope."""


def _check_devices_exist(devices):
    available = {}
    for d in _config.list_logical_devices():
        kind, index = _core.parse_device(d.name)
        available[(kind, index)] = d.name
    for dev in devices:
        if not isinstance(dev, str):
            raise TypeError(f"devices must be strings such as '/cpu:0', got {dev!r}")
        try:
            key = _core.parse_device(dev)
        except ValueError as e:
            raise ValueError(f"devices: {e}") from None
        if tuple(key) not in available:
            names = ", ".join(sorted(available.values()))
            raise ValueError(
                f"devices: '{dev}' does not exist. Available logical devices: {names}. Split the CPU into "
                "more with mdtrain.config.set_logical_device_configuration or MDTRAIN_NUM_CPU_DEVICES."
            )


class CrossDeviceOps:
    """How gradients are combined across replicas (tf.distribute.CrossDeviceOps).

    All of them add the replicas' gradients in replica order, so they give bitwise the same
    weights; they differ in who does the work."""

    _communication = "threads"
    _reduction = "all_reduce"


class NcclAllReduce(CrossDeviceOps):
    def __init__(self, num_packs=1):
        self.num_packs = num_packs


class HierarchicalCopyAllReduce(CrossDeviceOps):
    def __init__(self, num_packs=1):
        self.num_packs = num_packs


class ReductionToOneDevice(CrossDeviceOps):
    """Sums on the first replica's device, then copies the result to the others."""

    _reduction = "reduce_to_one"

    def __init__(self, reduce_to_device=None, accumulation_fn=None):
        if accumulation_fn is not None:
            raise NotImplementedError("ReductionToOneDevice: accumulation_fn is not supported")
        self.reduce_to_device = reduce_to_device


class MirroredStrategy(Strategy):
    """Synchronous data parallelism: one replica per device, gradients all-reduced.

    devices=None takes every GPU, or every logical CPU device when there is no GPU.
    """

    def __init__(self, devices=None, cross_device_ops=None):
        if devices is None:
            gpus = _config.list_logical_devices("GPU")
            devices = [d.name for d in (gpus or _config.list_logical_devices("CPU"))]
        elif isinstance(devices, str):
            raise TypeError("devices must be a list of device names, e.g. ['/cpu:0', '/cpu:1'], not a string")
        devices = list(devices)
        if not devices:
            raise ValueError("devices must not be empty")
        _check_devices_exist(devices)
        if cross_device_ops is not None and not isinstance(cross_device_ops, CrossDeviceOps):
            raise TypeError(
                f"cross_device_ops must be a tf.distribute.CrossDeviceOps instance, got {cross_device_ops!r}")
        self._cross_device_ops = cross_device_ops
        ops = cross_device_ops or CrossDeviceOps()
        super().__init__(_core.MirroredStrategy(devices, ops._communication, ops._reduction))
        _log.info("Using MirroredStrategy with devices %s", tuple(self._core.devices))


class DistributedDataset:
    """A dataset whose global batches are split into per-replica slices, in replica order."""

    def __init__(self, dataset, strategy):
        self._dataset = dataset
        self._strategy = strategy

    def __iter__(self):
        import numpy as np

        n = self._strategy.num_replicas_in_sync
        for element in self._dataset:
            def split(array):
                array = np.asarray(array)
                sizes = [len(array) // n + (1 if r < len(array) % n else 0) for r in range(n)]
                bounds = np.cumsum([0] + sizes)
                return PerReplica([array[bounds[r]:bounds[r + 1]] for r in range(n)])

            yield _map_structure(split, element)


def get_strategy():
    """The strategy of the innermost scope, or the default one-device strategy."""
    global _default_strategy
    if _scopes.stack:
        return _scopes.stack[-1]
    if _default_strategy is None:
        _default_strategy = _DefaultStrategy("/cpu:0")
    return _default_strategy


def has_strategy():
    return bool(_scopes.stack)


def in_cross_replica_context():
    return True


def _current_scope():
    """The strategy whose scope is open, or None."""
    return _scopes.stack[-1] if _scopes.stack else None
