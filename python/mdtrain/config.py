"""tf.config: the devices mdtrain can place replicas on.

A physical CPU can be split into several logical CPU devices, as TensorFlow does::

    cpu = mdtrain.config.list_physical_devices("CPU")[0]
    mdtrain.config.set_logical_device_configuration(cpu, [mdtrain.config.LogicalDeviceConfiguration()] * 2)

or, with no change to the script, ``MDTRAIN_NUM_CPU_DEVICES=2``. Each logical CPU device runs its
replica on its own thread, one core each.
"""
import os
import types
from typing import NamedTuple, Optional

from mdtrain import _core

_ENV_CPU_DEVICES = "MDTRAIN_NUM_CPU_DEVICES"


class PhysicalDevice(NamedTuple):
    name: str
    device_type: str


class LogicalDevice(NamedTuple):
    name: str
    device_type: str


class LogicalDeviceConfiguration:
    """One logical device (TF's LogicalDeviceConfiguration); the limits are accepted and unused on CPU."""

    def __init__(self, memory_limit: Optional[int] = None, experimental_priority=None,
                 experimental_device_ordinal=None):
        self.memory_limit = memory_limit
        self.experimental_priority = experimental_priority
        self.experimental_device_ordinal = experimental_device_ordinal

    def __repr__(self):
        return f"LogicalDeviceConfiguration(memory_limit={self.memory_limit})"


_logical_cpu_config = None  # list of LogicalDeviceConfiguration set by the user, or None


def _check_device_type(device_type):
    if device_type is None:
        return None
    if not isinstance(device_type, str) or device_type.upper() not in ("CPU", "GPU"):
        raise ValueError(f"device_type must be 'CPU' or 'GPU' (or None), got {device_type!r}")
    return device_type.upper()


def list_physical_devices(device_type=None):
    device_type = _check_device_type(device_type)
    devices = [PhysicalDevice("/physical_device:CPU:0", "CPU")]
    devices += [PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(_core.cuda_device_count())]
    return [d for d in devices if device_type in (None, d.device_type)]


def _num_logical_cpus():
    if _logical_cpu_config is not None:
        return len(_logical_cpu_config)
    env = os.environ.get(_ENV_CPU_DEVICES)
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"{_ENV_CPU_DEVICES} must be a positive integer, got {env!r}")
        return n
    return 1


def list_logical_devices(device_type=None):
    device_type = _check_device_type(device_type)
    prefix = "/job:localhost/replica:0/task:0/device:"
    devices = [LogicalDevice(f"{prefix}CPU:{i}", "CPU") for i in range(_num_logical_cpus())]
    devices += [LogicalDevice(f"{prefix}GPU:{i}", "GPU") for i in range(_core.cuda_device_count())]
    return [d for d in devices if device_type in (None, d.device_type)]


def set_logical_device_configuration(device, logical_devices):
    """Splits the physical CPU into len(logical_devices) logical CPU devices (None resets to one)."""
    global _logical_cpu_config
    if not isinstance(device, PhysicalDevice):
        raise TypeError(f"device must be a PhysicalDevice from list_physical_devices(), got {device!r}")
    if device.device_type != "CPU":
        raise ValueError(f"logical devices can only be configured on the CPU here, got {device.name}")
    if logical_devices is None:
        _logical_cpu_config = None
        return
    logical_devices = list(logical_devices)
    if not logical_devices or not all(isinstance(d, LogicalDeviceConfiguration) for d in logical_devices):
        raise ValueError("logical_devices must be a non-empty list of LogicalDeviceConfiguration")
    _logical_cpu_config = logical_devices


def get_logical_device_configuration(device):
    if not isinstance(device, PhysicalDevice):
        raise TypeError(f"device must be a PhysicalDevice, got {device!r}")
    if device.device_type == "CPU" and _logical_cpu_config is not None:
        return list(_logical_cpu_config)
    return None


def get_visible_devices(device_type=None):
    return list_physical_devices(device_type)


class _Threading:
    """tf.config.threading: how many threads one replica's ops may split their work over.

    By default one replica alone uses every core (MDTRAIN_CPU_THREADS overrides it): mdtrain cuts
    its GEMMs and convolutions into blocks for its own threads and calls the BLAS single-threaded.
    While several replicas run (MirroredStrategy) each uses one thread whatever this says: N
    replicas on N cores beat one op on N threads. On a machine shared with other busy processes,
    1 is safer: the threads wait for each other by spinning briefly."""

    _user_set = False  # set_intra_op_parallelism_threads was called

    @staticmethod
    def set_intra_op_parallelism_threads(num_threads):
        """0 means every core, as in TF."""
        if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 0:
            raise ValueError(f"num_threads must be a non-negative integer, got {num_threads!r}")
        _core.set_cpu_threads(num_threads or (os.cpu_count() or 1))
        _Threading._user_set = True

    @staticmethod
    def get_intra_op_parallelism_threads():
        return _core.cpu_thread_count()

    @staticmethod
    def set_inter_op_parallelism_threads(num_threads):
        """Accepted for compatibility; mdtrain runs one op at a time per replica."""

    @staticmethod
    def get_inter_op_parallelism_threads():
        return 1


threading = _Threading()


def _env_cpu_threads():
    """MDTRAIN_CPU_THREADS as a count, None when unset; ValueError when it is not a positive integer."""
    env = os.environ.get("MDTRAIN_CPU_THREADS")
    if not env:
        return None
    try:
        n = int(env)
    except ValueError:
        n = -1
    if n < 1:
        raise ValueError(f"MDTRAIN_CPU_THREADS must be a positive integer, got {env!r}")
    return n


def _cpu_threads_per_local_worker(workers, cores=None):
    """The intra-op threads each of `workers` processes training on one host gets when they split
    its cores (MPI workers of one host, a LocalCluster's workers): two workers each splitting ops
    over every core would fight over them (the threads spin while they wait)."""
    return max(1, (cores or os.cpu_count() or 1) // workers)


def _init_threads():
    n = _env_cpu_threads()
    if n is not None:
        _core.set_cpu_threads(n)


_init_threads()

def _memory_device(device):
    """'GPU:0', '/device:CPU:1', ... -> 'CPU:1' for one existing device; ValueError like TF's otherwise."""
    import re
    if not isinstance(device, str) or not re.search(r"(cpu|gpu):\d+$", device.strip().lower()):
        raise ValueError(f"Failed parsing device name: {device!r}. Note a valid device string should at least "
                         f"contain a device type and a device index, like \"GPU:0\".")
    kind, index = _core.parse_device(device)
    if index >= len(list_logical_devices(kind)):
        raise ValueError(f"No matching devices found for {device!r}")
    return f"{kind}:{index}"


def get_memory_info(device):
    """tf.config.experimental.get_memory_info: {"current": bytes, "peak": bytes} for one device.

    Measured: every allocation is charged to a device and every release credited back. Unlike TF,
    CPU devices are tracked too: logical CPU devices share one heap, so a CPU allocation counts for
    the device whose work allocated it (a replica's or a shard's weights, optimizer state,
    activations); anything else counts for CPU:0, the host. Under ModelParallel the host's
    unsharded copy of the model (what get_weights and checkpoints read) counts for no device.
    "peak" is the most held at once since the last reset_memory_stats(device)."""
    return dict(_core.memory_info(_memory_device(device)))


def reset_memory_stats(device):
    """tf.config.experimental.reset_memory_stats: sets the device's peak to its current bytes."""
    _core.reset_memory_stats(_memory_device(device))


# tf.config.experimental spells some of these differently.
experimental = types.SimpleNamespace(
    list_physical_devices=list_physical_devices,
    list_logical_devices=list_logical_devices,
    set_virtual_device_configuration=set_logical_device_configuration,
    get_virtual_device_configuration=get_logical_device_configuration,
    VirtualDeviceConfiguration=LogicalDeviceConfiguration,
    set_memory_growth=lambda device, enable: None,
    get_memory_info=get_memory_info,
    reset_memory_stats=reset_memory_stats,
)
