"""keras.distribution.DeviceMesh and list_devices.

Follows Keras 3's ``keras.distribution`` (keras/src/distribution/distribution_lib.py):
``DeviceMesh(shape, axis_names, devices=None)`` with properties ``shape``, ``axis_names`` and
``devices`` (a NumPy array of the devices, reshaped to ``shape``), and ``list_devices(device_type=None)``
returning device strings such as ``"cpu:0"`` (Keras's TensorFlow backend spelling). The devices fill
the mesh in row-major order; ``devices=None`` takes every device ``list_devices()`` returns.

Device strings may be written the Keras way (``"cpu:0"``, ``"gpu:1"``) or the TensorFlow way
(``"/device:CPU:0"``, ``"/cpu:0"``, or a ``tf.config.list_logical_devices()`` entry); the mesh keeps
them as given, like Keras. Where mdtrain differs: a device that does not exist, or one listed twice, is
a ``ValueError`` when the mesh is made (Keras defers to its backend), and ``list_devices`` returns this
process's logical devices (a multi-worker job's global mesh is built by its strategy).

The mesh itself is the C++ ``DeviceMesh`` (cpp/mdtrain/strategy/device_mesh.h), which strategies use
to split communicators per axis.
"""
import os
import re

import numpy as np

from mdtrain import _core
from mdtrain import config as _config

__all__ = ["DeviceMesh", "list_devices"]


def list_devices(device_type=None):
    """Every device of ``device_type`` (``"cpu"``, ``"gpu"`` or ``"tpu"``, any case), as ``"cpu:0"``-style
    strings. ``None``: the GPUs if there are any, else the (logical) CPU devices, as Keras does.

    In a job of several processes (started by an MPI launcher, e.g. ``python -m mdtrain.launch -n 2``)
    the global devices are returned, as Keras does in a distributed setting: every worker's local
    devices, worker by worker, named the TensorFlow way (``"/job:worker/replica:0/task:1/device:CPU:0"``).
    """
    if device_type is not None:
        if not isinstance(device_type, str) or device_type.lower() not in ("cpu", "gpu", "tpu"):
            raise ValueError(f"device_type must be one of 'cpu', 'gpu' or 'tpu' (or None), got {device_type!r}")
        device_type = device_type.lower()
        if device_type == "tpu":
            return []  # mdtrain has no TPU backend: there are none, as in Keras without TPUs
        local = _keras_names(_config.list_logical_devices(device_type.upper()))
    else:
        gpus = _config.list_logical_devices("GPU")
        local = _keras_names(gpus or _config.list_logical_devices("CPU"))
    workers = _worker_count()
    if workers == 1:
        return local
    # Every worker of an mdtrain job has the same local devices (one process per host slot).
    return [_global_name(w, d) for w in range(workers) for d in local]


def _worker_count():
    """The processes of this job: 1 unless an MPI launcher started it."""
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS"):
        try:
            return max(1, int(os.environ[name]))
        except (KeyError, ValueError):
            continue
    return 1


def _global_name(worker, keras_name):
    kind, index = keras_name.split(":")
    return f"/job:worker/replica:0/task:{worker}/device:{kind.upper()}:{index}"


_GLOBAL = re.compile(r"^/job:[a-z]+(?:/replica:\d+)?/task:(\d+)/device:([A-Za-z]+):(\d+)$")


def _split_global(names):
    """For global device names (with ``/task:``): (num_workers, the local devices of each worker) after
    checking that the devices fill the workers in order, the same local devices on each. None when no
    name is global; a ValueError when only some are or the order is not worker-major."""
    parsed = [_GLOBAL.match(n) for n in names]
    if not any(parsed):
        return None
    if not all(parsed):
        raise ValueError(f"devices: mix of global ('/job:worker/.../task:i/device:...') and local device names: "
                         f"{names}")
    tasks = [int(m.group(1)) for m in parsed]
    local = [f"{m.group(2).lower()}:{m.group(3)}" for m in parsed]
    workers = _worker_count()
    per_worker = len(names) // workers if len(names) % workers == 0 else 0
    expected = [w for w in range(workers) for _ in range(per_worker)]
    if tasks != expected or any(local[i] != local[i % per_worker] for i in range(len(local))):
        raise ValueError(f"devices: a mesh across the {workers} workers of this job must list every worker's devices "
                         f"in worker order, the same local devices for each (as list_devices() gives them); got "
                         f"tasks {tasks} with devices {local}")
    return workers, local[:per_worker]


def _keras_names(logical_devices):
    out = []
    for d in logical_devices:
        kind, index = _core.parse_device(d.name)
        out.append(f"{kind.lower()}:{index}")
    return out


def _device_names(devices):
    """``devices`` with every device replaced by its name, keeping the nesting: a device is a string
    or an object with a string ``.name`` (tf.config's LogicalDevice, itself a tuple)."""
    if isinstance(devices, (str, np.str_)):
        return str(devices)
    name = getattr(devices, "name", None)
    if isinstance(name, str):
        return name
    if isinstance(devices, (list, tuple, np.ndarray)):
        return [_device_names(d) for d in devices]
    raise ValueError(f"devices must hold device names such as 'cpu:0' or '/device:CPU:0', got {devices!r}")


def _check_shape(shape):
    try:
        dims = list(shape)
    except TypeError:
        raise ValueError(f"shape must be a tuple or list of integers, got shape={shape!r}") from None
    for n in dims:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"shape must be a tuple or list of positive integers, got shape={shape!r}")
    return [int(n) for n in dims]


class DeviceMesh:
    """A grid of devices with named axes (keras.distribution.DeviceMesh).

    Args:
        shape: tuple or list of integers, e.g. ``(8,)`` for data parallelism or ``(2, 4)`` for
            data x model parallelism.
        axis_names: one unique name per axis of ``shape``, e.g. ``["batch", "model"]``.
        devices: devices to place on the mesh in row-major order (any array shape whose size is the
            product of ``shape``); ``None`` takes every device from ``list_devices()``.

    Raises ``ValueError`` naming the argument and the shapes when ``shape`` or ``axis_names`` is empty,
    they differ in length, an axis name repeats, the device count is not the product of ``shape``,
    or a device does not exist or repeats.
    """

    def __init__(self, shape, axis_names, devices=None):
        dims = _check_shape(shape)
        if isinstance(axis_names, str):
            raise ValueError(f"axis_names must be a list of strings, got axis_names={axis_names!r}")
        try:
            names = list(axis_names)
        except TypeError:
            raise ValueError(f"axis_names must be a list of strings, got axis_names={axis_names!r}") from None
        if not dims or not names:
            raise ValueError(f"shape and axis_names cannot be empty. Received: shape={shape}, axis_names={axis_names}")
        if not all(isinstance(n, str) for n in names):
            raise ValueError(f"axis_names must be strings, got axis_names={axis_names!r}")
        if len(dims) != len(names):
            raise ValueError(f"shape and axis_names should have the same length. Received: shape={shape}, "
                             f"axis_names={axis_names}")
        if devices is None:
            devices = list_devices()
        device_array = np.array(_device_names(devices))
        if int(np.prod(dims)) != device_array.size:
            raise ValueError(f"shape does not match the number of devices. Received: shape={shape}; "
                             f"devices.shape={device_array.shape}")
        flat = [str(d) for d in device_array.reshape(-1)]
        across_workers = _split_global(flat)
        # The C++ mesh checks the rest (axis names unique and non-empty, devices distinct, a last
        # axis that stays inside a worker) and raises ValueError with a "[mesh]" message.
        if across_workers is None:
            _check_devices_exist(flat)
            self._core = _core.DeviceMesh(dims, names, flat)
        else:
            workers, local = across_workers
            _check_devices_exist(local)
            self._core = _core.DeviceMesh.for_workers(dims, names, workers, local)
        self._shape = shape
        self._axis_names = axis_names
        self._devices = np.array(flat).reshape(dims)

    @property
    def shape(self):
        return self._shape

    @property
    def axis_names(self):
        return self._axis_names

    @property
    def devices(self):
        return self._devices

    def __repr__(self):
        return f"<{type(self).__name__} shape={self.shape}, axis_names={self.axis_names}>"

    def __str__(self):
        return self.__repr__()


def _check_devices_exist(names):
    available = {}
    for d in _config.list_logical_devices():
        available[tuple(_core.parse_device(d.name))] = d.name
    for name in names:
        try:
            key = tuple(_core.parse_device(name))
        except ValueError as e:
            raise ValueError(f"devices: {e}") from None
        if key not in available:
            known = ", ".join(_keras_names(_config.list_logical_devices()))
            raise ValueError(f"devices: '{name}' does not exist. Available devices: {known}. Split the CPU into more "
                             "with mdtrain.config.set_logical_device_configuration or MDTRAIN_NUM_CPU_DEVICES.")
