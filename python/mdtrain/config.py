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
_ENV_CPU_THREADS = "MDTRAIN_CPU_THREADS"

# Upper bounds of the counts that start threads (a replica thread per logical CPU device, an op's
# split over intra-op threads): a count from a typo or a hostile environment would otherwise start
# that many threads (100000 of them exhaust a machine's PID space, for every process on it).
#   threads: max(4 x the cores, 256) (core/threading/thread_team.h); devices: 256, the logical CPU
#   devices whose memory is tracked (core/memory_stats.h).
MAX_CPU_THREADS = _core.max_cpu_threads()
MAX_CPU_DEVICES = _core.MAX_CPU_DEVICES
_THREADS_LIMIT_WHY = f"max(4 x the {os.cpu_count() or 1} cores, 256)"
_DEVICES_LIMIT_WHY = "the logical CPU devices mdtrain tracks"


def _parse_env_count(name, limit, why):
    """The positive integer in environment variable `name` (None when unset or empty), at most
    `limit`; ValueError naming the variable, its value and the accepted range otherwise. Strict:
    digits only, so "1e20", "4.0", "-3" and "0x10" are refused rather than guessed at."""
    text = os.environ.get(name)
    if not text:
        return None
    digits = text.strip()
    n = int(digits) if digits.isascii() and digits.isdigit() else None
    if n is None or not 1 <= n <= limit:
        raise ValueError(f"{name}={text!r} is not accepted: expected an integer from 1 to {limit} ({why})")
    return n


def _check_count(arg, value, low, limit, why):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= limit:
        raise ValueError(f"{arg} must be an integer from {low} to {limit} ({why}), got {value!r}")
    return value


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
    return _parse_env_count(_ENV_CPU_DEVICES, MAX_CPU_DEVICES, _DEVICES_LIMIT_WHY) or 1


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
    if len(logical_devices) > MAX_CPU_DEVICES:
        raise ValueError(f"logical_devices: {len(logical_devices)} logical CPU devices exceed the limit of "
                         f"{MAX_CPU_DEVICES} ({_DEVICES_LIMIT_WHY}; each runs its replica on a thread of its own)")
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
        """0 means every core, as in TF; at most MAX_CPU_THREADS."""
        _check_count("set_intra_op_parallelism_threads: num_threads", num_threads, 0, MAX_CPU_THREADS,
                     _THREADS_LIMIT_WHY)
        _core.set_cpu_threads(num_threads or min(os.cpu_count() or 1, MAX_CPU_THREADS))
        _Threading._user_set = True

    @staticmethod
    def get_intra_op_parallelism_threads():
        return _core.cpu_thread_count()

    @staticmethod
    def set_inter_op_parallelism_threads(num_threads):
        """Checked like set_intra_op_parallelism_threads and otherwise without effect: mdtrain runs
        one op at a time per replica (there is no inter-op pool to size)."""
        _check_count("set_inter_op_parallelism_threads: num_threads", num_threads, 0, MAX_CPU_THREADS,
                     _THREADS_LIMIT_WHY)

    @staticmethod
    def get_inter_op_parallelism_threads():
        return 1


threading = _Threading()


def _env_cpu_threads():
    """MDTRAIN_CPU_THREADS as a count, None when unset; ValueError naming it unless it is an
    integer from 1 to MAX_CPU_THREADS."""
    return _parse_env_count(_ENV_CPU_THREADS, MAX_CPU_THREADS, _THREADS_LIMIT_WHY)


def _cpu_threads_per_local_worker(workers, cores=None):
    """The intra-op threads each of `workers` processes training on one host gets when they split
    its cores (MPI workers of one host, a LocalCluster's workers): two workers each splitting ops
    over every core would fight over them (the threads spin while they wait)."""
    return max(1, (cores or os.cpu_count() or 1) // workers)


def _init_threads():
    # Both variables are checked at import, before anything starts a thread: a bad value fails
    # `import mdtrain` with a ValueError naming it, not a later strategy (or a thread storm).
    _num_logical_cpus()
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
