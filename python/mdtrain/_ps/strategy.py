"""tf.distribute.experimental.ParameterServerStrategy (TF2's, with a ClusterCoordinator).

The chief (the process running the training script) holds the model and schedules work; the
`ps` tasks hold the variables, cut along axis 0 by the variable partitioner, and their optimizer
state; the `worker` tasks run the steps. A model compiled under the strategy is placed on the
servers when it first trains (its current weights become the servers' initial values). The
chief's copy is refreshed from the servers when `fit` returns and before it evaluates, so
`get_weights`, `evaluate`, `predict` and `save` see the trained weights.
"""
import json
import logging
import math
import numbers
import os
import tempfile
import threading
import time
import uuid

import zmq

from mdtrain import _cluster, _core
from mdtrain import distribute as _distribute
from mdtrain._ps import job_secret, wire
from mdtrain._ps.coordinator import ParameterServersRestored, default_worker_timeout
from mdtrain._ps.resources import PerWorkerResource, resolve

_log = logging.getLogger("mdtrain")

_CHIEF_CLIENT_ID = 1 << 20  # the chief's id in the servers' logs (workers are 0..n-1)


class ParameterServerStrategy(_distribute.Strategy):
    """ParameterServerStrategy(cluster_resolver, variable_partitioner=None).

    Beyond TF's arguments (keyword-only, all optional):
        synchronous: apply the mean of `replicas_to_aggregate` pushes per step (backup workers:
            the first k of n count, later ones are dropped), instead of each push as it comes.
        replicas_to_aggregate: k for synchronous mode (default: the number of workers).
        max_staleness: asynchronous mode: a gradient computed on weights more than this many
            updates old is dropped, or scaled by 1 / (1 + staleness) with staleness_policy="rescale".
        deterministic: steps run in a fixed order with staleness 0 (step t starts from the weights
            step t - 1 left) and closure k runs on worker k % n: the same script gives the same
            weights every time (for tests; the workers' compute then does not overlap).
        timeout: seconds any wait for a parameter server may take before it fails naming the server.
        worker_timeout: seconds without an answer after which a worker is declared dead and its
            closure rescheduled (default 10, or MDTRAIN_PS_WORKER_TIMEOUT).
        worker_rejoin_timeout: seconds closures wait while no worker answers (every worker dead,
            or none started yet) before they fail with WorkersUnavailableError naming the workers:
            `fit`, `join()` and `fetch()` raise it (default 300; math.inf waits for ever).
        ps_restart_timeout: seconds to wait for a failed parameter server to come back.
    """

    def __init__(self, cluster_resolver=None, variable_partitioner=None, *, synchronous=False,
                 replicas_to_aggregate=None, max_staleness=None, staleness_policy="drop", deterministic=False,
                 timeout=30.0, worker_timeout=None, ps_restart_timeout=60.0, worker_rejoin_timeout=300.0):
        if not _core.zmq_available():
            raise RuntimeError("ParameterServerStrategy needs mdtrain built with ZeroMQ: install libzmq3-dev "
                               "(Debian) and pkg-config, then reinstall mdtrain")
        if cluster_resolver is None:
            cluster_resolver = _cluster.TFConfigClusterResolver()
        spec = cluster_resolver.cluster_spec()
        if not isinstance(spec, _cluster.ClusterSpec):
            spec = _cluster.ClusterSpec(spec)
        for job in ("worker", "ps"):
            if job not in spec.jobs or spec.num_tasks(job) == 0:
                raise ValueError(f"ParameterServerStrategy: the cluster has no '{job}' task (jobs: {spec.jobs}); "
                                 "it needs at least one worker and one ps")
        _cluster.validate_cluster(spec)
        if variable_partitioner is not None and not callable(variable_partitioner):
            raise TypeError(f"ParameterServerStrategy: variable_partitioner must be callable, got "
                            f"{variable_partitioner!r}")
        num_workers = spec.num_tasks("worker")
        if replicas_to_aggregate is None:
            replicas_to_aggregate = num_workers
        if synchronous and not 1 <= replicas_to_aggregate <= num_workers:
            raise ValueError(f"ParameterServerStrategy: replicas_to_aggregate must be in [1, {num_workers}] "
                             f"(the workers), got {replicas_to_aggregate}")
        if max_staleness is not None and (synchronous or max_staleness < 0):
            raise ValueError("ParameterServerStrategy: max_staleness is a non-negative bound for asynchronous "
                             f"training, got {max_staleness} with synchronous={synchronous}")
        if staleness_policy not in ("drop", "rescale"):
            raise ValueError(f"ParameterServerStrategy: staleness_policy must be 'drop' or 'rescale', got "
                             f"{staleness_policy!r}")
        if deterministic and (synchronous or max_staleness is not None):
            raise ValueError("ParameterServerStrategy: deterministic=True fixes the staleness at 0; it does not "
                             "combine with synchronous or max_staleness")
        super().__init__(_core.OneDeviceStrategy("CPU:0"))
        self._cluster_resolver = cluster_resolver
        self._cluster_spec = spec
        self._worker_addresses = spec.job_tasks("worker")
        self._ps_addresses = spec.job_tasks("ps")
        self._partitioner = variable_partitioner
        self._options = dict(synchronous=bool(synchronous), replicas_to_aggregate=int(replicas_to_aggregate),
                             max_staleness=max_staleness, staleness_policy=staleness_policy)
        self._deterministic = bool(deterministic)
        self._timeout = _seconds(timeout, "timeout", finite=True)
        self._worker_timeout = _seconds(worker_timeout if worker_timeout is not None else default_worker_timeout(),
                                        "worker_timeout", finite=True)
        self._ps_restart_timeout = _seconds(ps_restart_timeout, "ps_restart_timeout", finite=True)
        self._auth_key = job_secret.job_key()  # the chief refuses to start without the job's secret
        self._worker_rejoin_timeout = _seconds(worker_rejoin_timeout, "worker_rejoin_timeout")
        self._coordinator = None
        self._jobs = {}  # id(model) -> _PsJob
        self._jobs_lock = threading.RLock()

    @property
    def num_replicas_in_sync(self):
        return 1  # TF: the replicas of one worker (one CPU device each here)

    @property
    def cluster_resolver(self):
        return self._cluster_resolver

    @property
    def _num_workers(self):
        return 1  # the chief's own model runs alone; workers are scheduled, not in sync

    def __repr__(self):
        return (f"<ParameterServerStrategy: {len(self._worker_addresses)} workers, {len(self._ps_addresses)} "
                "parameter servers>")

    def _ps_reduce(self):
        return _worker_side_strategy, ()

    def _coordinator_or_new(self):
        if self._coordinator is None:
            from mdtrain._ps.coordinator import ClusterCoordinator

            ClusterCoordinator(self)
        return self._coordinator

    def _job(self, model):
        """The servers' copy of a compiled model: placed on first use."""
        with self._jobs_lock:
            job = self._jobs.get(id(model))
            if job is None:
                job = _PsJob(self, model)
                self._jobs[id(model)] = job
            return job

    def _compiled(self, model):
        """compile() under this strategy: a closure that uses the model sends a reference to it."""
        with self._jobs_lock:
            self._jobs.pop(id(model), None)  # compiled again: placed again on first use
        model._ps_reduce = lambda: self._job(model).model_reduce()

    def _fit(self, model, **kwargs):
        from mdtrain._ps.fit import fit

        return fit(model, self, **kwargs)

    def _refresh_model(self, model):
        job = self._jobs.get(id(model))
        if job is not None and job.configured:
            job.pull_into_model()

    def _restart_parameter_servers(self, message):
        """A server stopped answering: wait for it to come back, load every server from the last
        checkpoint (all of them, so they agree), and say where training resumes."""
        jobs = [j for j in self._jobs.values() if j.configured]
        missing = [j for j in jobs if j.checkpoint is None]
        if missing:
            raise RuntimeError(f"{message}. There is no checkpoint to restart the parameter servers from: train "
                               "with keras.callbacks.BackupAndRestore(backup_dir) to survive a server failure")
        _log.warning("ParameterServerStrategy: %s; restarting every parameter server from the last checkpoint",
                     message)
        for job in jobs:
            job.configure(load=job.checkpoint)
        checkpoints = [j.checkpoint for j in jobs]
        return ParameterServersRestored(f"{message}: the parameter servers restarted from {checkpoints}; the steps "
                                        "scheduled after that checkpoint were cancelled", checkpoints)

    def _control(self, address, message, what, wait_seconds):
        """Sends a control message to a task and returns its answer; fails naming the task."""
        sock = wire.new_socket(zmq.DEALER)
        try:
            sock.connect(wire.tcp_address(address))
            deadline = time.monotonic() + wait_seconds
            wire.send(sock, message)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sock.poll(int(left * 1000) + 1):
                    raise TimeoutError(f"ParameterServerStrategy: {what} at {address} did not answer within "
                                       f"{wait_seconds:g} s")
                message = wire.receive(sock)
                if message is not None:  # None: a frame that failed authentication, dropped
                    return message
        finally:
            sock.close()

    def _close(self):
        """Releases this strategy's shards on the servers and stops its coordinator, leaving the tasks
        running (for the next strategy of the same cluster)."""
        if self._coordinator is not None:
            self._coordinator.shutdown()
        for job in list(self._jobs.values()):
            for i, address in enumerate(self._ps_addresses):
                try:
                    self._control(address, ("release", job.id), f"ps {i}", 5.0)
                except TimeoutError:
                    pass
        self._jobs.clear()

    def _worker_stats(self):
        """Each worker's engine counters of its latest job (pull / push / compute seconds, steps,
        bytes), by task index: a closure that reads them, scheduled until every worker answered
        (the coordinator gives a closure to whichever worker is free). For benchmarks and the
        planner's probe."""
        def read():
            from mdtrain._ps.services import _state
            return _state.task_index, [core.stats() for core, _ in _state.jobs.values()][-1]

        coordinator, found, workers = self._coordinator_or_new(), {}, len(self._worker_addresses)
        for _ in range(20 * workers):
            index, stats = coordinator.schedule(read).fetch()
            found[index] = stats
            if len(found) == workers:
                return found
        raise RuntimeError(f"ParameterServerStrategy: {len(found)} of {workers} workers answered {20 * workers} "
                           f"stats closures")

    def shutdown(self):
        """Ends the job: stops every worker and parameter-server task (what `join()` waits for there)."""
        if self._coordinator is not None:
            self._coordinator.shutdown()
        for kind, addresses in (("worker", self._worker_addresses), ("ps", self._ps_addresses)):
            for i, address in enumerate(addresses):
                try:
                    self._control(address, ("shutdown",), f"{kind} {i}", 5.0)
                except TimeoutError:
                    _log.warning("ParameterServerStrategy: %s %d at %s did not answer the shutdown", kind, i, address)


def _seconds(value, name, finite=False):
    """A duration argument: a positive number of seconds (math.inf allowed unless finite), as a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"ParameterServerStrategy: {name} must be a number of seconds, got {value!r}")
    value = float(value)
    if not value > 0 or (finite and math.isinf(value)):  # NaN fails `> 0`
        raise ValueError(f"ParameterServerStrategy: {name} must be a positive{' finite' if finite else ''} number "
                         f"of seconds, got {value!r}")
    return value


class _PsJob:
    """One compiled model's variables on the servers: layout, endpoints, the chief's client."""

    def __init__(self, strategy, model):
        self.strategy, self.model = strategy, model
        self.id = uuid.uuid4().hex
        self.configured = False
        self.checkpoint = None  # the directory of the last checkpoint (BackupAndRestore)
        self.checkpoint_position = None  # (epoch, step) it was taken at
        self.array_iterators = {}  # fit's per-worker batches of the caller's arrays (see fit.py)
        if model.non_trainable_weights:
            raise ValueError(f"ParameterServerStrategy: model '{model.name}' has non-trainable weights "
                             "(BatchNormalization's moving statistics), which the parameter servers do not hold yet; "
                             "train it with MirroredStrategy or MultiWorkerMirroredStrategy")
        names = [n for layer in model.layers for n in layer._core.weight_names()]
        weights = model.get_weights()
        num_ps = len(strategy._ps_addresses)
        variables, shards = [], []
        for name, w in zip(names, weights):
            k = 1
            if strategy._partitioner is not None:
                k = int(strategy._partitioner(w.shape, w.dtype)[0])
            variables.append((name, tuple(int(d) for d in w.shape), w.dtype.name))
            shards.append(max(1, min(k, num_ps, w.shape[0] if w.ndim else 1)))
        self.layout_args = (num_ps, variables, shards)
        self.layout = _core.PsShardLayout.make(*self.layout_args)
        self.endpoints = None
        self.client = None
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.mdtrain")
            model.save(path)
            with open(path, "rb") as f:
                model_file = f.read()
        self.model_resource = PerWorkerResource(_ModelLoader(self.id, model_file))
        self.configure(initial_values=weights)

    def configure(self, initial_values=None, load=None):
        s = self.strategy
        spec = dict(s._options, layout=self.layout_args, optimizer=json.dumps(self.model.optimizer._full_config()),
                    initial_values=[w for w in initial_values] if initial_values is not None else None, load=load)
        endpoints, versions = [], []
        for i, address in enumerate(s._ps_addresses):
            wait = s._ps_restart_timeout if load else s._timeout
            answer = s._control(address, ("configure", self.id, spec), f"ps {i}", wait)
            if answer[0] != "configured":
                raise RuntimeError(f"ParameterServerStrategy: ps {i} at {address} could not take its shards: {answer[1]}")
            endpoints.append(answer[1])
            versions.append(answer[2])
        self.endpoints = endpoints
        self.client = _core.ParameterServerClient(self.layout, endpoints, _CHIEF_CLIENT_ID, s._timeout,
                                                  auth_key=s._auth_key)
        self.configured = True
        if s._coordinator is not None:
            s._coordinator._rebase(max(versions))

    def worker_config(self):
        return dict(id=self.id, layout=self.layout_args, endpoints=list(self.endpoints),
                    timeout=self.strategy._timeout)

    def model_reduce(self):
        """How the model travels in a closure: a reference each worker resolves to its own copy."""
        return _resolve_model, (self.worker_config(), self.model_resource._id,
                                wire.creator_for_target(self.model_resource._id, self.model_resource._creator))

    def pull_into_model(self):
        values, _ = self.client.pull()
        self.model._core.set_weights(values)

    def versions(self):
        return self.client.versions()

    def stats(self):
        return [self.client.stats(i) for i in range(len(self.endpoints))]

    def save(self, directory):
        self.client.save(os.path.abspath(directory))

    _STALENESS_COUNTERS = ("pushes_dropped_stale", "pushes_rescaled", "pushes_dropped_late")

    def log_staleness(self, epoch):
        """Logs the gradients the servers dropped or rescaled for staleness since the last call
        (summed over servers: every push reaches each server holding a shard)."""
        stats = self.stats()
        totals = {k: sum(s[k] for s in stats) for k in self._STALENESS_COUNTERS}
        seen = getattr(self, "_staleness_seen", dict.fromkeys(self._STALENESS_COUNTERS, 0))
        new = {k: totals[k] - seen[k] for k in totals}
        self._staleness_seen = totals
        if any(new.values()):
            _log.warning("ParameterServerStrategy: epoch %d: %d stale gradients dropped, %d rescaled, %d late "
                         "(synchronous) dropped, counted per server", epoch + 1, new["pushes_dropped_stale"],
                         new["pushes_rescaled"], new["pushes_dropped_late"])
        return new


class _WorkerStrategy(_distribute.Strategy):
    """On a worker: the strategy a worker's copy of a model is compiled under."""

    def __init__(self, core):
        super().__init__(core)

    @property
    def num_replicas_in_sync(self):
        return 1

    def __repr__(self):
        return "<ParameterServerStrategy (worker side)>"


class _WorkerSideStrategy:
    """What a closure's `strategy` is on a worker: strategy.run runs the function here."""

    num_replicas_in_sync = 1

    def run(self, fn, args=(), kwargs=None):
        return fn(*args, **(kwargs or {}))

    def reduce(self, reduce_op, value, axis=None):
        return value

    def experimental_local_results(self, value):
        return (value,)

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        from mdtrain._input_context import InputContext
        from mdtrain._ps.services import _state

        return dataset_fn(InputContext(_state.num_workers, _state.task_index))

    def experimental_distribute_dataset(self, dataset, options=None):
        return dataset


def _worker_side_strategy():
    return _WorkerSideStrategy()


class _ModelLoader:
    """Makes a worker's copy of a model: the chief's model file, loaded under the job's strategy."""

    def __init__(self, job_id, model_file):
        self.job_id, self.model_file = job_id, model_file

    def __call__(self):
        from mdtrain import keras
        from mdtrain._ps.services import _state

        strategy = _state.jobs[self.job_id][1]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.mdtrain")
            with open(path, "wb") as f:
                f.write(self.model_file)
            with strategy.scope():
                return keras.models.load_model(path)


def _resolve_model(config, resource_id, creator_bytes):
    from mdtrain._ps.services import _state

    entry = _state.jobs.get(config["id"])
    if entry is None:
        layout = _core.PsShardLayout.make(*config["layout"])
        core = _core.ParameterServerWorkerStrategy(layout, config["endpoints"], _state.task_index, config["timeout"],
                                                   auth_key=job_secret.job_key())
        entry = _state.jobs[config["id"]] = (core, _WorkerStrategy(core))
    core = entry[0]
    if list(core.endpoints) != list(config["endpoints"]):
        core.set_endpoints(config["endpoints"])
    if _state.plan is not None:
        core.plan_steps(*_state.plan)
    return resolve(resource_id, creator_bytes)


