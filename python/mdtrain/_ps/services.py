"""The task services: what a `worker` or `ps` task of a ParameterServerStrategy job runs.

`tf.distribute.Server(cluster_spec, job_name, task_index)` starts the service of that task on
its host:port, as TF's does; `server.join()` blocks until the chief shuts the job down.

- A worker service runs the closures the coordinator sends it, one at a time, on a thread of its
  own, while its socket thread answers heartbeats (a worker busy with a long step still answers,
  so the coordinator tells "busy" from "dead"). Per-worker resources (datasets, iterators, the
  worker's copy of a model) are created on first use from the creator shipped with them, so a
  restarted worker recreates them by itself.
- A ps service waits for the chief to configure it with its shards (layout, initial values or a
  checkpoint to load, the optimizer), then runs the C++ ParameterShardServer on an endpoint of
  its own; the chief hands that endpoint to the workers. Serving pulls and applying pushes is
  C++ on the server's thread: no Python, no GIL.
"""
import logging
import os
import queue
import threading
import traceback
import uuid

import zmq

from mdtrain import _cluster, _core
from mdtrain._ps import wire

_log = logging.getLogger("mdtrain")

_POLL_MS = 100


class Server:
    """tf.distribute.Server: the service of one task of a cluster (worker or ps)."""

    def __init__(self, server_or_cluster_def, job_name=None, task_index=None, protocol=None, config=None,
                 start=True):
        cluster = server_or_cluster_def
        if not isinstance(cluster, _cluster.ClusterSpec):
            cluster = _cluster.ClusterSpec(cluster)
        if job_name is None:
            raise ValueError("tf.distribute.Server: job_name is required ('worker' or 'ps')")
        if job_name not in cluster.jobs:
            raise ValueError(f"tf.distribute.Server: job '{job_name}' is not in the cluster (jobs: {cluster.jobs})")
        task_index = 0 if task_index is None else int(task_index)
        if task_index not in cluster.task_indices(job_name):
            raise ValueError(f"tf.distribute.Server: the cluster has no task {task_index} of job '{job_name}' "
                             f"(tasks: {cluster.task_indices(job_name)})")
        if job_name not in ("worker", "ps"):
            raise ValueError(f"tf.distribute.Server: only 'worker' and 'ps' tasks run a server here, not "
                             f"'{job_name}' (the chief runs the training script itself)")
        self._address = cluster.task_address(job_name, task_index)
        self._job_name, self._task_index = job_name, task_index
        self._num_workers = cluster.num_tasks("worker") if "worker" in cluster.jobs else 0
        self._service = None
        if start:
            self.start()

    @property
    def target(self):
        return "tcp://" + self._address

    def start(self):
        if self._service is None:
            if self._job_name == "worker":
                self._service = _WorkerService(self._address, self._task_index, self._num_workers)
            else:
                self._service = _PsService(self._address, self._task_index)
            self._service.start()

    def join(self):
        """Blocks until the chief shuts the job down."""
        self.start()
        self._service.join()

    def stop(self):
        if self._service is not None:
            self._service.stop()


class _Service:
    def __init__(self, address, task_index):
        self.address, self.task_index = address, task_index
        self.incarnation = uuid.uuid4().hex  # changes when the task restarts: its state is gone
        self._socket = wire.new_socket(zmq.ROUTER)
        try:
            self._socket.bind(wire.tcp_address(address, bind=True))
        except zmq.ZMQError as e:
            self._socket.close()
            raise OSError(f"cannot listen on {address} for task {task_index}: {e}") from None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"mdtrain-{type(self).__name__}", daemon=True)

    def start(self):
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def join(self):
        while self._thread.is_alive():
            self._thread.join(0.5)

    def stop(self):
        self._stop.set()
        self.join()


class _WorkerService(_Service):
    def __init__(self, address, task_index, num_workers):
        super().__init__(address, task_index)
        self.num_workers = num_workers
        self._jobs = queue.Queue()
        self._results_in = wire.new_socket(zmq.PAIR)
        endpoint = f"inproc://mdtrain-worker-results-{id(self)}"
        self._results_in.bind(endpoint)
        self._results_out = wire.new_socket(zmq.PAIR)
        self._results_out.connect(endpoint)
        self._executor = threading.Thread(target=self._execute, name="mdtrain-worker-closures", daemon=True)
        _state.service = self

    def _serve(self):
        self._executor.start()
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._results_in, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                ready = dict(poller.poll(_POLL_MS))
                if self._results_in in ready:
                    self._socket.send_multipart(self._results_in.recv_multipart())
                if self._socket in ready:
                    identity, message = wire.receive(self._socket, with_identity=True)
                    kind = message[0]
                    if kind == "ping":
                        wire.send(self._socket, ("pong", message[1], self.incarnation), identity)
                    elif kind == "run":
                        self._jobs.put((identity, message))
                    elif kind == "shutdown":
                        wire.send(self._socket, ("bye",), identity)
                        self._stop.set()
        finally:
            self._jobs.put(None)
            self._socket.close()

    def _execute(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            identity, (_, closure_id, plan, payload) = job
            reply = _run_closure(closure_id, plan, payload)
            self._results_out.send_multipart([identity, wire.dumps(reply)])


def _is_ps_failure(error):
    """A parameter server that did not answer (or refused because it restarted): the chief recovers."""
    text = str(error)
    return text.startswith("[ps] ps ") and (isinstance(error, TimeoutError) or "pull again" in text)


def _run_closure(closure_id, plan, payload):
    _state.plan = plan
    try:
        fn, args, kwargs = wire.loads(payload)
        result = fn(*args, **kwargs)
        return ("done", closure_id, wire.dumps(result))
    except BaseException as e:  # noqa: B902 - every failure goes back to the coordinator
        kind = "ps_failure" if _is_ps_failure(e) else "error"
        try:
            error = wire.dumps(e)
        except Exception:  # an exception that cannot travel: its text does
            error = wire.dumps(RuntimeError(f"{type(e).__name__}: {e}"))
        return (kind, closure_id, error, traceback.format_exc())
    finally:
        _state.plan = None


class _WorkerState:
    """What a worker process keeps between closures."""

    def __init__(self):
        self.service = None
        self.plan = None  # (first step token, first start version or None) of the running closure
        self.resources = {}  # resource id -> object
        self.creators = {}  # resource id -> the pickled creator that made it
        self.jobs = {}  # job id -> (C++ worker strategy, its Python strategy, {model id: model})

    @property
    def task_index(self):
        return 0 if self.service is None else self.service.task_index

    @property
    def num_workers(self):
        return 1 if self.service is None else self.service.num_workers


_state = _WorkerState()


class _PsService(_Service):
    def __init__(self, address, task_index):
        super().__init__(address, task_index)
        self._servers = {}  # job id -> ParameterShardServer
        self._host = wire.tcp_address(address, bind=True).rsplit(":", 1)[0]

    def _serve(self):
        try:
            while not self._stop.is_set():
                if not self._socket.poll(_POLL_MS):
                    continue
                identity, message = wire.receive(self._socket, with_identity=True)
                kind = message[0]
                if kind == "ping":
                    wire.send(self._socket, ("pong", message[1], self.incarnation), identity)
                elif kind == "configure":
                    wire.send(self._socket, self._configure(*message[1:]), identity)
                elif kind == "release":
                    server = self._servers.pop(message[1], None)
                    if server is not None:
                        server.stop()
                    wire.send(self._socket, ("released",), identity)
                elif kind == "shutdown":
                    self._shutdown()
                    wire.send(self._socket, ("bye",), identity)
                    self._stop.set()
        finally:
            self._shutdown()
            self._socket.close()

    def _configure(self, job_id, spec):
        try:
            old = self._servers.pop(job_id, None)
            if old is not None:
                old.stop()
            layout = _core.PsShardLayout.make(*spec["layout"])
            optimizer = _core.make_optimizer(spec["optimizer"])
            server = _core.ParameterShardServer(
                layout, self.task_index, spec["initial_values"] or [], optimizer, endpoint=f"{self._host}:*",
                synchronous=spec["synchronous"], replicas_to_aggregate=spec["replicas_to_aggregate"],
                max_staleness=spec["max_staleness"], staleness_policy=spec["staleness_policy"])
            if spec.get("load"):
                server.load(spec["load"])
            self._servers[job_id] = server
            _log.info("ps %d serves job %s on %s", self.task_index, job_id, server.endpoint)
            return ("configured", server.endpoint, server.version)
        except Exception as e:  # the chief reports it, naming this task
            return ("error", f"{type(e).__name__}: {e}")

    def _shutdown(self):
        for server in self._servers.values():
            server.stop()
        self._servers.clear()


def run_task_from_environment():
    """`python -m mdtrain.distribute_server`: the task TF_CONFIG names, until the chief ends the job."""
    resolver = _cluster.TFConfigClusterResolver()
    server = Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id)
    _log.info("%s %d listening on %s (pid %d)", resolver.task_type, resolver.task_id, server.target, os.getpid())
    server.join()
