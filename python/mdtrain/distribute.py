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
    """How gradients are combined across replicas (tf.distribute.CrossDeviceOps)."""

    _communication = "threads"


class NcclAllReduce(CrossDeviceOps):
    def __init__(self, num_packs=1):
        self.num_packs = num_packs


class HierarchicalCopyAllReduce(CrossDeviceOps):
    def __init__(self, num_packs=1):
        self.num_packs = num_packs


class ReductionToOneDevice(CrossDeviceOps):
    def __init__(self, reduce_to_device=None, accumulation_fn=None):
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
        communication = (cross_device_ops or CrossDeviceOps())._communication
        super().__init__(_core.MirroredStrategy(devices, communication))
        _log.info("Using MirroredStrategy with devices %s", tuple(self._core.devices))


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
