"""tf.distribute: strategies that place replicas on devices.

``with strategy.scope():`` makes the strategy current: models, optimizers and metrics created or
compiled inside belong to it. A model built outside any scope and compiled inside one is
mirrored by that strategy (Keras 3 would silently train it on one device). Training a model
under a scope of another strategy than the one it was compiled for is a ValueError.
"""
import contextlib
import enum
import json
import logging
import os
import threading

from mdtrain import _cluster, _core
from mdtrain import config as _config
from mdtrain._eager.errors import InvalidArgumentError

_log = logging.getLogger("mdtrain")


class ReduceOp(enum.Enum):
    SUM = "SUM"
    MEAN = "MEAN"


class _ScopeState(threading.local):
    def __init__(self):
        self.stack = []
        self.replica = None  # (strategy, replica id) while strategy.run calls fn
        self.deferred = None  # the _DeferredStep collecting model.train_step calls in strategy.run
        self.gradients = None  # the ReplicaGradients collecting apply_gradients calls in strategy.run


class PerReplica:
    """One value per replica (what strategy.run returns and experimental_distribute_dataset yields)."""

    def __init__(self, values):
        self.values = tuple(values)

    def __repr__(self):
        return f"PerReplica({list(self.values)!r})"

    # strategy.run of a function returning a tuple (or dict) gives one PerReplica of them; TF gives
    # the tuple of PerReplica values, so unpacking and indexing work that way too:
    # `index, outputs = strategy.run(predict, ...)`.
    def _structured(self):
        first = self.values[0] if self.values else None
        if isinstance(first, (tuple, list, dict)) and all(
                type(v) is type(first) and len(v) == len(first) for v in self.values):
            return first
        raise TypeError("this PerReplica value holds no tuple, list or dict to unpack or index")

    def __bool__(self):  # a value, whatever __len__ says
        return True

    def __len__(self):
        return len(self._structured())

    def __iter__(self):
        first = self._structured()
        keys = list(first) if isinstance(first, dict) else range(len(first))
        return iter([PerReplica([v[k] for v in self.values]) for k in keys])

    def __getitem__(self, key):
        self._structured()
        return PerReplica([v[key] for v in self.values])


def _replica_gradients():
    """The collector of the replicas' apply_gradients calls in the running strategy.run."""
    return _scopes.gradients


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


def _run_output(value):
    """A replica's result as strategy.run returns it: deferred train_step losses resolved, NumPy
    arrays (what the distributed datasets' slices compute to) as tensors, as TF's run returns
    tensors. Python numbers stay as they are."""
    import numpy as np

    if isinstance(value, _DeferredValue):
        return value.value
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "biuf":
        from mdtrain._eager.tensor import wrap

        return wrap(np.asarray(value))
    return value


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

    # Who writes checkpoints, logs and progress bars (TF's extended.should_checkpoint): the
    # chief, worker 0, when the strategy spans processes; otherwise this process.
    @property
    def should_checkpoint(self):
        return self._core.worker_index == 0

    should_save_summary = should_checkpoint

    @property
    def _num_workers(self):
        return self._core.num_workers

    def _sync_workers(self, arrays):
        """Overwrites each NumPy array (in place) with worker 0's: no-op with one worker."""
        return arrays

    def _check_single_worker(self, what):
        if self._core.num_workers > 1:
            raise NotImplementedError(f"{what} with several workers is not supported yet: use model.fit, which "
                                      "shards each global batch across all workers' replicas")

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
        """Yields each global batch of `dataset` cut into per-replica slices (PerReplica values).
        With several workers, every worker iterates the same global batches and keeps the slices
        of its own replicas (as fit does)."""
        _refuse_input_options(options, "experimental_distribute_dataset")
        return DistributedDataset(dataset, self)

    def run(self, fn, args=(), kwargs=None):
        """Calls fn once per replica with that replica's values of args (PerReplica unpacked).

        Inside fn, ``model.train_step((x, y))`` contributes this replica's slice; the step runs
        once for all replicas when every replica has called it, and the returned value becomes
        that replica's loss (sum of its losses / global batch, as TF's compute_average_loss)."""
        from mdtrain._eager.replica_gradients import ReplicaGradients

        kwargs = kwargs or {}
        if _scopes.replica is not None:
            raise RuntimeError("strategy.run was called inside strategy.run (from a replica's function)")
        n = self._num_local_replicas
        first = self._first_local_replica
        deferred = _DeferredStep()
        gradients = ReplicaGradients(n, self._sum_across_workers if self._core.num_workers > 1 else None, first)
        results = []
        with self.scope():
            # This process's replicas run one after another (see _eager/replica_gradients.py).
            for r in range(n):
                pick = lambda v, r=r: v.values[r] if isinstance(v, PerReplica) else v  # noqa: E731
                _scopes.replica = (self, first + r)
                _scopes.deferred = deferred
                _scopes.gradients = gradients
                try:
                    results.append(fn(*_map_structure(pick, tuple(args)), **_map_structure(pick, kwargs)))
                finally:
                    _scopes.replica = None
                    _scopes.deferred = None
                    _scopes.gradients = None
            gradients.check_complete()
            if deferred.models and self._core.num_workers > 1:
                raise NotImplementedError("model.train_step inside strategy.run with several workers is not supported "
                                          "yet: use a GradientTape step with optimizer.apply_gradients, or model.fit")
            deferred.run(n)
        results = [_map_structure(_run_output, r) for r in results]
        return results[0] if n == 1 else PerReplica(results)

    @property
    def _num_local_replicas(self):
        return len(self._core.devices)

    @property
    def _first_local_replica(self):
        return self._core.worker_index * self._num_local_replicas

    def _sum_across_workers(self, arrays):
        """Arrays (this worker's values) -> the element-wise sums over the workers (in float64, rank
        order, then back to each array's dtype). Every worker must call it at the same point."""
        import numpy as np

        flat = np.concatenate([np.asarray(a, dtype=np.float64).reshape(-1) for a in arrays]) if arrays else \
            np.zeros(0)
        self._core.sum_across_workers(flat)
        out, offset = [], 0
        for a in arrays:
            a = np.asarray(a)
            out.append(flat[offset:offset + a.size].reshape(a.shape).astype(a.dtype))
            offset += a.size
        return out

    def reduce(self, reduce_op, value, axis=None):
        """Sum or mean of a PerReplica value over replicas (axis: also reduce that axis of each).

        Tensors (what a tape's step returns) reduce to a tensor of their dtype, added in replica
        order; other values (NumPy, Python numbers) to a float64 NumPy value. With several workers
        each worker's replicas are reduced first, then the workers' results are summed (float64,
        rank order); every worker must call reduce at the same point."""
        import numpy as np

        op = ReduceOp(reduce_op.value if isinstance(reduce_op, ReduceOp) else str(reduce_op).upper())
        values = value.values if isinstance(value, PerReplica) else (value,)
        from mdtrain._eager import tensor as _tensor

        if self._core.num_workers > 1:
            return self._reduce_across_workers(op, values, axis)
        if any(isinstance(v, _tensor._TENSOR_TYPES) for v in values):
            return _reduce_tensors(op, values, axis)
        arrays = [np.asarray(v, dtype=np.float64) for v in values]
        if axis is not None:
            total = sum(a.sum(axis=axis) for a in arrays)
            count = sum(a.shape[axis] for a in arrays)
            return total / count if op is ReduceOp.MEAN else total
        total = sum(arrays)
        return total / len(arrays) if op is ReduceOp.MEAN else total

    def _reduce_across_workers(self, op, values, axis):
        import numpy as np

        from mdtrain._eager import tensor as _tensor

        is_tensor = any(isinstance(v, _tensor._TENSOR_TYPES) for v in values)
        local = _reduce_tensors(ReduceOp.SUM, values, axis) if is_tensor else \
            sum(np.asarray(v, dtype=np.float64) if axis is None else np.asarray(v, dtype=np.float64).sum(axis=axis)
                for v in values)
        count = len(values) if axis is None else sum(np.shape(v)[axis] for v in values)
        total, count = self._sum_across_workers([np.asarray(local), np.asarray(count, dtype=np.float64)])
        if op is ReduceOp.MEAN:
            total = (total / count).astype(total.dtype)
        return _tensor.wrap(total) if is_tensor else total

    def experimental_local_results(self, value):
        """The values of this process's replicas, as a tuple (one value: a tuple of it)."""
        return value.values if isinstance(value, PerReplica) else (value,)

    def experimental_distribute_values_from_function(self, value_fn):
        """PerReplica of value_fn(context) for each replica; context has replica_id_in_sync_group
        and num_replicas_in_sync (tf.distribute.experimental.ValueContext)."""
        n, first = self.num_replicas_in_sync, self._first_local_replica
        return PerReplica([value_fn(ValueContext(first + r, n)) for r in range(self._num_local_replicas)])

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """dataset_fn(tf.distribute.InputContext) builds this worker's input pipeline, batched to the
        per-replica batch size; each step gives its next element to each replica in turn."""
        _refuse_input_options(options, "distribute_datasets_from_function")
        context = InputContext(num_input_pipelines=self._core.num_workers, input_pipeline_id=self._core.worker_index,
                               num_replicas_in_sync=self.num_replicas_in_sync)
        return DistributedDataset(dataset_fn(context), self, split=False)


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


def _device_list(devices, argument, default_kinds):
    """A strategy's device names: `devices` checked, or (None) every logical device of the first
    of `default_kinds` that has any."""
    if devices is None:
        for kind in default_kinds:
            found = [d.name for d in _config.list_logical_devices(kind)]
            if found:
                return found
        return []
    if isinstance(devices, str):
        raise TypeError(f"{argument} must be a list of device names, e.g. ['/cpu:0', '/cpu:1'], not a string")
    devices = list(devices)
    if not devices:
        raise ValueError(f"{argument} must not be empty")
    _check_devices_exist(devices)
    return devices


class CrossDeviceOps:
    """How gradients are combined across replicas (tf.distribute.CrossDeviceOps).

    All of them add the replicas' gradients in replica order, so they give bitwise the same
    weights; they differ in who does the work."""

    # "auto": NCCL when the replicas are GPUs, the in-process "threads" backend on CPU devices
    # (NcclAllReduce and HierarchicalCopyAllReduce therefore also map to NCCL on GPUs).
    _communication = "auto"
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


def _absent_gpus(devices):
    """(canonical names of `devices`, the GPUs among them this process does not have), or None
    when a device is not a parsable name or a missing device is not a GPU (refused at once)."""
    if devices is None or isinstance(devices, str):
        return None
    try:
        keys = [tuple(_core.parse_device(d)) for d in devices]
    except (TypeError, ValueError):
        return None
    present = {tuple(_core.parse_device(d.name)) for d in _config.list_logical_devices()}
    missing = [k for k in keys if k not in present]
    if not missing or any(kind != "GPU" for kind, _ in missing):
        return None
    if len(set(keys)) != len(keys):
        raise ValueError(f"devices: a device is listed twice in {list(devices)}")
    canonical = [f"/job:localhost/replica:0/task:0/device:{kind}:{index}" for kind, index in keys]
    return canonical, [f"/job:localhost/replica:0/task:0/device:{kind}:{index}" for kind, index in missing]


class MirroredStrategy(Strategy):
    """Synchronous data parallelism: one replica per device, gradients all-reduced.

    devices=None takes every GPU, or every logical CPU device when there is no GPU.

    As in TensorFlow, GPUs this process does not have (devices=["/gpu:0", "/gpu:1"] on a machine
    without them) are accepted when the strategy is made: its num_replicas_in_sync and
    worker_devices are those of the devices named, and scope() can be entered. Using the devices
    (compiling or running a model under it, strategy.run, reduce, distributing a dataset) raises
    tf.errors.InvalidArgumentError, TensorFlow's error for a device specification it cannot
    satisfy, naming the devices there are. A missing CPU device is a ValueError at once.
    """

    def __init__(self, devices=None, cross_device_ops=None):
        if cross_device_ops is not None and not isinstance(cross_device_ops, CrossDeviceOps):
            raise TypeError(
                f"cross_device_ops must be a tf.distribute.CrossDeviceOps instance, got {cross_device_ops!r}")
        self._cross_device_ops = cross_device_ops
        self._absent = _absent_gpus(devices)
        if self._absent is not None:
            self._requested = list(devices)
            _log.warning("MirroredStrategy: devices %s are not GPUs of this process (%s); the strategy fails when "
                         "it runs", self._absent[1], _core.cuda_unavailable_reason() or "no such GPU")
            return
        devices = _device_list(devices, "devices", ("GPU", "CPU"))
        ops = cross_device_ops or CrossDeviceOps()
        super().__init__(_core.MirroredStrategy(devices, ops._communication, ops._reduction))
        _log.info("Using MirroredStrategy with devices %s", tuple(self._core.devices))

    def _unavailable(self):
        canonical, missing = self._absent
        reason = _core.cuda_unavailable_reason() or "no such GPU is visible"
        available = ", ".join(d.name for d in _config.list_logical_devices())
        kinds = ", ".join(sorted({_core.parse_device(d.name)[0] for d in _config.list_logical_devices()}))
        return InvalidArgumentError(
            None, None,
            f"Could not satisfy device specification '{missing[0]}': MirroredStrategy(devices={self._requested}) "
            f"names GPUs this process does not have ({', '.join(missing)}; {reason}). Supported device types "
            f"[{kinds}]. All available devices [{available}].")

    @property
    def _core(self):
        if getattr(self, "_absent", None) is not None:
            raise self._unavailable()
        return self.__dict__["_core_object"]

    @_core.setter
    def _core(self, core):
        self.__dict__["_core_object"] = core

    @property
    def num_replicas_in_sync(self):
        return len(self._absent[0]) if self._absent is not None else super().num_replicas_in_sync

    @property
    def worker_devices(self):
        return tuple(self._absent[0]) if self._absent is not None else super().worker_devices

    @property
    def should_checkpoint(self):
        return True if self._absent is not None else super().should_checkpoint

    should_save_summary = should_checkpoint

    @property
    def _num_workers(self):
        return 1 if self._absent is not None else super()._num_workers

    def __repr__(self):
        if self._absent is not None:
            return f"<MirroredStrategy devices={list(self._absent[0])} (not available in this process)>"
        return super().__repr__()


class CentralStorageStrategy(Strategy):
    """tf.distribute.experimental.CentralStorageStrategy: variables and the optimizer state on the
    parameter device (the host), a replica on every compute device. Each step the replicas'
    gradients are summed onto the parameter device in replica order, one update runs there, and the
    new weights go to the replicas: bitwise the weights of
    MirroredStrategy(cross_device_ops=ReductionToOneDevice()), with the optimizer state held once.

    compute_devices=None takes every logical CPU device; parameter_device=None is "/cpu:0".
    Compute devices are logical CPU devices for now (GPU replicas are a ValueError).
    """

    def __init__(self, compute_devices=None, parameter_device=None):
        compute_devices = _device_list(compute_devices, "compute_devices", ("CPU",))
        if parameter_device is None:
            parameter_device = "/cpu:0"
        elif not isinstance(parameter_device, str):
            raise TypeError(f"parameter_device must be a device name such as '/cpu:0', got {parameter_device!r}")
        super().__init__(_core.CentralStorageStrategy(compute_devices, parameter_device))
        _log.info("Using CentralStorageStrategy with compute devices %s and parameter device %s",
                  tuple(self._core.devices), self._core.parameter_device)

    @property
    def parameter_device(self):
        return self._core.parameter_device


class CommunicationImplementation(enum.Enum):
    """tf.distribute.experimental.CommunicationImplementation."""
    AUTO = "AUTO"
    RING = "RING"
    NCCL = "NCCL"


class CommunicationOptions:
    """tf.distribute.experimental.CommunicationOptions: how MultiWorkerMirroredStrategy talks.

    timeout_seconds: how long a collective waits for the other workers before it fails, naming
    the ranks that did not arrive (None: 300 s). implementation: AUTO and RING use MPI between
    workers; NCCL is for GPU replicas, and as in TensorFlow a worker whose replicas are CPU
    devices accepts it and communicates as with AUTO. bytes_per_pack: the size of the gradient buckets (0: 25 MB); each
    is summed by one collective as soon as backward has finished its layers, so smaller buckets
    start communicating earlier and larger ones make fewer calls."""

    def __init__(self, bytes_per_pack=0, timeout_seconds=None, implementation=CommunicationImplementation.AUTO):
        if not isinstance(bytes_per_pack, int) or bytes_per_pack < 0:
            raise ValueError(f"CommunicationOptions: bytes_per_pack must be a non-negative integer, got "
                             f"{bytes_per_pack!r}")
        if timeout_seconds is not None and (isinstance(timeout_seconds, bool) or
                                            not isinstance(timeout_seconds, (int, float)) or
                                            not timeout_seconds > 0):
            raise ValueError(f"CommunicationOptions: timeout_seconds must be a positive number or None, got "
                             f"{timeout_seconds!r}")
        if isinstance(implementation, str):
            implementation = CommunicationImplementation(implementation.upper())
        if not isinstance(implementation, CommunicationImplementation):
            raise TypeError(f"CommunicationOptions: implementation must be a CommunicationImplementation, got "
                            f"{implementation!r}")
        self.bytes_per_pack = bytes_per_pack
        self.timeout_seconds = timeout_seconds
        self.implementation = implementation


class cluster_resolver:  # noqa: N801 - tf.distribute.cluster_resolver namespace
    ClusterResolver = _cluster.ClusterResolver
    SimpleClusterResolver = _cluster.SimpleClusterResolver
    TFConfigClusterResolver = _cluster.TFConfigClusterResolver


class experimental:  # noqa: N801 - tf.distribute.experimental namespace
    CentralStorageStrategy = CentralStorageStrategy
    CommunicationImplementation = CommunicationImplementation
    CommunicationOptions = CommunicationOptions
    # ParameterServerStrategy, partitioners, coordinator: set at the end of this module.


_MPI_LAUNCHER_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "SLURM_NTASKS")


def _launched_by_mpi():
    return any(v in os.environ for v in _MPI_LAUNCHER_ENV[:4])


def _local_worker_count():
    for name in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"):
        try:
            return max(1, int(os.environ[name].split("(")[0]))
        except (KeyError, ValueError):
            continue
    return 1


def _share_cores_with_local_workers():
    """Workers on one host split its cores between their intra-op threads, unless the user chose a
    count (MDTRAIN_CPU_THREADS or tf.config.threading): two workers each splitting ops over every
    core would fight over them (the threads spin while they wait)."""
    if "MDTRAIN_CPU_THREADS" in os.environ or _config.threading._user_set:
        return
    _core.set_cpu_threads(_config._cpu_threads_per_local_worker(_local_worker_count()))


class ClusterResolver:
    """Where this worker sits in the job (a small tf.distribute.cluster_resolver.ClusterResolver)."""

    def __init__(self, num_workers, task_id):
        self.task_type = "worker"
        self.task_id = task_id
        self.num_workers = num_workers

    def cluster_spec(self):
        return {"worker": [f"mpi-rank-{i}" for i in range(self.num_workers)]}


def _check_tf_config(num_workers, rank):
    """TF_CONFIG is accepted when it agrees with the MPI job; alone it cannot start one (see docs)."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return
    try:
        cfg = json.loads(raw)
        cluster = cfg.get("cluster", {})
        task = cfg.get("task", {})
        tasks = len(cluster.get("worker", [])) + len(cluster.get("chief", []))
        index = int(task.get("index", 0)) + (1 if task.get("type") == "worker" and cluster.get("chief") else 0)
    except (ValueError, AttributeError, TypeError) as e:
        raise ValueError(f"TF_CONFIG is not valid JSON of the form {{'cluster': {{'worker': [...]}}, 'task': "
                         f"{{'type': 'worker', 'index': i}}}}: {e}") from None
    if not _launched_by_mpi():
        if tasks > 1:
            raise ValueError(
                f"TF_CONFIG describes {tasks} workers, but mdtrain's workers talk over MPI, not gRPC: start the job "
                f"with `python -m mdtrain.launch -n {tasks} script.py` (or mpirun/srun) instead of setting TF_CONFIG "
                "on each host.")
        return
    if tasks != num_workers or index != rank:
        raise ValueError(f"TF_CONFIG (worker {index} of {tasks}) disagrees with the MPI launcher (rank {rank} of "
                         f"{num_workers}); unset TF_CONFIG or make them agree")


class MultiWorkerMirroredStrategy(Strategy):
    """Synchronous data parallelism across processes (tf.distribute.MultiWorkerMirroredStrategy).

    Start one process per worker with ``python -m mdtrain.launch -n N script.py`` (mpirun/srun
    work too); each process drives a replica per local device (its logical CPU devices), every
    global batch is cut across all replicas of all workers, and gradients are summed inside each
    worker, then across workers over MPI. A process not started by an MPI launcher is a job of
    one worker. Only the chief (worker 0) writes checkpoints and logs and shows progress bars.
    """

    def __init__(self, cluster_resolver=None, communication_options=None):
        if communication_options is None:
            communication_options = CommunicationOptions()
        if not isinstance(communication_options, CommunicationOptions):
            raise TypeError(f"communication_options must be a tf.distribute.experimental.CommunicationOptions, got "
                            f"{communication_options!r}")
        use_mpi = _launched_by_mpi()
        if communication_options.implementation is CommunicationImplementation.NCCL and \
                not _config.list_logical_devices("GPU"):
            # As TensorFlow: NCCL is for GPU tensors; CPU replicas' collectives go the CPU way.
            _log.info("MultiWorkerMirroredStrategy: CommunicationImplementation.NCCL applies to GPU replicas and this "
                      "process has none (%s); its CPU replicas communicate over %s, as with AUTO",
                      _core.cuda_unavailable_reason() or "no GPU found", "MPI" if use_mpi else "threads")
        if use_mpi and not _core.mpi_available():
            raise ValueError("MultiWorkerMirroredStrategy: this process was started by an MPI launcher, but mdtrain "
                             "was built without MPI (install libopenmpi-dev and reinstall mdtrain)")
        devices = [d.name for d in (_config.list_logical_devices("GPU") or _config.list_logical_devices("CPU"))]
        if use_mpi:
            _share_cores_with_local_workers()
        core = _core.MultiWorkerMirroredStrategy(devices, "threads", use_mpi)
        if communication_options.timeout_seconds is not None:
            core.set_timeout(float(communication_options.timeout_seconds))
        core.gradient_bucket_bytes = communication_options.bytes_per_pack
        super().__init__(core)
        self.communication_options = communication_options
        _check_tf_config(core.num_workers, core.worker_index)
        self.cluster_resolver = cluster_resolver or ClusterResolver(core.num_workers, core.worker_index)
        if core.num_workers > 1:
            # Every worker continues worker 0's seed source, so the models and layers created from
            # now on get the same seeds everywhere even without keras.utils.set_random_seed (and
            # worker 0 the seeds it would get in a single-process run).
            import numpy as np

            from mdtrain import _random

            # worker 0's seed-source state, as JSON in a fixed-size buffer
            state = np.zeros(1024, dtype=np.uint8)
            encoded = json.dumps(_random._get_state()).encode()
            state[:len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
            self._sync_workers([state])
            _random._set_state(json.loads(state.tobytes().rstrip(b"\0").decode()))
        _log.info("Using MultiWorkerMirroredStrategy: worker %d of %d, local devices %s", core.worker_index,
                  core.num_workers, tuple(core.devices))

    def _sync_workers(self, arrays):
        for a in arrays:
            self._core.broadcast_from_chief(a.reshape(-1).view("uint8"))
        return arrays

    def __repr__(self):
        return (f"<MultiWorkerMirroredStrategy worker {self._core.worker_index} of {self._core.num_workers}, "
                f"devices={list(self._core.devices)}>")


class ValueContext:
    """tf.distribute.experimental.ValueContext: which replica a value function builds a value for."""

    def __init__(self, replica_id_in_sync_group=0, num_replicas_in_sync=1):
        self.replica_id_in_sync_group = replica_id_in_sync_group
        self.num_replicas_in_sync = num_replicas_in_sync

    def __repr__(self):
        return (f"ValueContext(replica_id_in_sync_group={self.replica_id_in_sync_group}, "
                f"num_replicas_in_sync={self.num_replicas_in_sync})")


experimental.ValueContext = ValueContext


def _per_replica_structure(values):
    """Structures of per-replica values (one per replica) as one structure of PerReplica."""
    first = values[0]
    if isinstance(first, (tuple, list)):
        return type(first)(_per_replica_structure([v[i] for v in values]) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: _per_replica_structure([v[k] for v in values]) for k in first}
    return PerReplica(values)


def _refuse_input_options(options, where):
    """tf.distribute.InputOptions choose device placement and replication modes mdtrain does not
    have; refused rather than ignored (issue 34)."""
    if options is not None:
        raise NotImplementedError(f"{where}: options (tf.distribute.InputOptions) are not supported, got {options!r}")


class DistributedDataset:
    """A dataset for strategy.run: each element a structure of PerReplica values, in replica order.

    split=True (experimental_distribute_dataset): each global batch is cut into contiguous
    per-replica slices whose sizes differ by at most one. split=False
    (distribute_datasets_from_function): the dataset yields per-replica batches and each step
    takes the next one for each replica in turn; replicas left without one at the end get an
    empty batch of the same structure."""

    def __init__(self, dataset, strategy, split=True):
        self._dataset = dataset
        self._strategy = strategy
        self._split = split

    def __iter__(self):
        return DistributedIterator(self._elements(), self)

    def _elements(self):
        import numpy as np

        n = self._strategy.num_replicas_in_sync
        local = range(self._strategy._first_local_replica,
                      self._strategy._first_local_replica + self._strategy._num_local_replicas)
        if self._split:
            for element in self._dataset:
                def split(array):
                    array = np.asarray(array)
                    sizes = [len(array) // n + (1 if r < len(array) % n else 0) for r in range(n)]
                    bounds = np.cumsum([0] + sizes)
                    return PerReplica([array[bounds[r]:bounds[r + 1]] for r in local])

                yield _map_structure(split, element)
            return
        n = len(local)
        group = []
        for element in self._dataset:
            group.append(element)
            if len(group) == n:
                yield _per_replica_structure(group)
                group = []
        if group:
            empty = _map_structure(lambda a: np.asarray(a)[:0], group[0])
            yield _per_replica_structure(group + [empty] * (n - len(group)))

    @property
    def element_spec(self):
        """The TensorSpec structure of one replica's value (batch dimension None), from the
        dataset's element_spec (or its first element)."""
        from mdtrain._tensor_spec import TensorSpec

        spec = getattr(self._dataset, "element_spec", None)
        if spec is not None:
            return _map_structure(lambda s: TensorSpec((None,) + tuple(s.shape[1:]), s.dtype, s.name)
                                  if isinstance(s, TensorSpec) and s.shape else s, spec)
        import numpy as np

        first = next(iter(self._dataset))
        return _map_structure(lambda a: TensorSpec((None,) + np.shape(a)[1:], np.asarray(a).dtype), first)


class DistributedIterator:
    """iter(distributed_dataset): next(), get_next() (OutOfRangeError at the end) and
    get_next_as_optional()."""

    def __init__(self, elements, dataset):
        self._elements = elements
        self._dataset = dataset

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._elements)

    def get_next(self):
        try:
            return next(self._elements)
        except StopIteration:
            from mdtrain._eager.errors import OutOfRangeError

            raise OutOfRangeError(None, None, "End of sequence") from None

    def get_next_as_optional(self):
        try:
            return _Optional(True, next(self._elements))
        except StopIteration:
            return _Optional(False, None)

    @property
    def element_spec(self):
        return self._dataset.element_spec


class _Optional:
    """tf.experimental.Optional as get_next_as_optional returns it."""

    def __init__(self, has_value, value):
        self._has_value = has_value
        self._value = value

    def has_value(self):
        from mdtrain._eager.tensor import wrap
        import numpy as np

        return wrap(np.asarray(self._has_value))

    def get_value(self):
        if not self._has_value:
            from mdtrain._eager.errors import InvalidArgumentError

            raise InvalidArgumentError(None, None, "The optional does not have a value")
        return self._value


def _reduce_tensors(op, values, axis):
    """strategy.reduce of tensors: added in replica order in their dtype (TF's reduce)."""
    from mdtrain._eager import ops

    if axis is not None:
        total = ops.add_n([ops.reduce_sum(v, axis=axis) for v in values])
        if op is ReduceOp.MEAN:
            count = sum(int(ops.convert_to_tensor(v).shape[axis]) for v in values)
            total = total / count
        return total
    total = values[0]
    for v in values[1:]:
        total = total + v
    return total / len(values) if op is ReduceOp.MEAN else ops.convert_to_tensor(total)


def get_strategy():
    """The strategy of the innermost scope, else the one keras.distribution.set_distribution made
    global, else the default one-device strategy."""
    global _default_strategy
    if _scopes.stack:
        return _scopes.stack[-1]
    if _global is not None:
        return _global
    if _default_strategy is None:
        _default_strategy = _DefaultStrategy("/cpu:0")
    return _default_strategy


_global = None  # keras.distribution.set_distribution's distribution


def _global_strategy():
    return _global


def _set_global_strategy(strategy):
    global _global
    _global = strategy


def has_strategy():
    return bool(_scopes.stack)


def in_cross_replica_context():
    """False while strategy.run calls a replica's function, True elsewhere."""
    return _scopes.replica is None


def _current_scope():
    """The strategy whose scope is open, or None."""
    return _scopes.stack[-1] if _scopes.stack else None


# The parameter-server family lives in mdtrain._ps (it builds on the classes above).
from mdtrain._input_context import InputContext  # noqa: E402
from mdtrain._ps import coordinator as _ps_coordinator  # noqa: E402
from mdtrain._ps import partitioners as _ps_partitioners  # noqa: E402
from mdtrain._ps.services import Server  # noqa: E402,F401
from mdtrain._ps.strategy import ParameterServerStrategy  # noqa: E402
from mdtrain import plan as _planner  # noqa: E402


class coordinator:  # noqa: N801 - tf.distribute.coordinator namespace
    ClusterCoordinator = _ps_coordinator.ClusterCoordinator
    RemoteValue = _ps_coordinator.RemoteValue
    PerWorkerValue = _ps_coordinator.PerWorkerIterator


class _Partitioners:  # tf.distribute.experimental.partitioners
    Partitioner = _ps_partitioners.Partitioner
    FixedShardsPartitioner = _ps_partitioners.FixedShardsPartitioner
    MinSizePartitioner = _ps_partitioners.MinSizePartitioner
    MaxSizePartitioner = _ps_partitioners.MaxSizePartitioner


experimental.ParameterServerStrategy = ParameterServerStrategy
experimental.partitioners = _Partitioners
experimental.coordinator = coordinator

# The scaling planner (an mdtrain extension, docs/planner.md).
experimental.plan = _planner.plan
experimental.Cluster = _planner.Cluster
