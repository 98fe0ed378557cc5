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

Every frame is authenticated with the job key (wire.py, job_secret.py) before anything in it is
decoded: a task without a job secret refuses to start unless MDTRAIN_INSECURE_PS=1. A message a
task cannot authenticate, decode or handle is dropped, counted and logged with its peer, and the
task goes on serving; a serving loop that ends other than by the chief's shutdown (or stop())
makes join() raise, so `python -m mdtrain._ps.task` exits non-zero.
"""
import logging
import os
import queue
import threading
import traceback
import uuid

import zmq

from mdtrain import _cluster, _core
from mdtrain._ps import job_secret, wire
from mdtrain.compat.v1 import ConfigProto

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
        if config is not None and not isinstance(config, ConfigProto):
            raise TypeError(f"tf.distribute.Server: config must be a tf.compat.v1.ConfigProto or None, got "
                            f"{type(config).__name__}")
        if protocol not in (None, "grpc"):
            raise ValueError(f"tf.distribute.Server: protocol must be 'grpc' (TF's; mdtrain's tasks speak ZeroMQ), "
                             f"got {protocol!r}")
        self._key = job_secret.job_key()  # refuses to start without a job secret (or the opt-out)
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
                self._service = _WorkerService(self._address, self._task_index, self._key, self._num_workers)
            else:
                self._service = _PsService(self._address, self._task_index, self._key)
            self._service.start()

    def join(self):
        """Blocks until the chief shuts the job down; raises if the service ended otherwise."""
        self.start()
        self._service.join()

    def stop(self):
        if self._service is not None:
            self._service.stop()


class _Service:
    """A task's listening socket and the thread serving it, one message at a time."""

    kind = "task"

    def __init__(self, address, task_index, key):
        self.address, self.task_index = address, task_index
        self.incarnation = uuid.uuid4().hex  # changes when the task restarts: its state is gone
        self._key = key
        self._socket = wire.new_socket(zmq.ROUTER, key=key)
        try:
            self._socket.bind(wire.tcp_address(address, bind=True))
        except zmq.ZMQError as e:
            self._socket.close()
            raise OSError(f"cannot listen on {address} for task {task_index}: {e}") from None
        self._stop = threading.Event()
        self._ended_on_purpose = False  # the chief's shutdown, or stop()
        self._failure = None  # what ended a thread of the service unexpectedly
        self._handling_errors = 0
        self._thread = threading.Thread(target=self._guarded, args=(self._serve,),
                                         name=f"mdtrain-{type(self).__name__}", daemon=True)

    @property
    def name(self):
        return f"{self.kind} {self.task_index} at {self.address}"

    def _guarded(self, loop):
        """Runs a thread's loop; an exception escaping it is the service's failure (join() raises)."""
        try:
            loop()
        except BaseException as e:  # noqa: B902 - whatever it is, the task must not look finished
            self._failure = e
            _log.error("%s: %s ended unexpectedly:\n%s", self.name, threading.current_thread().name,
                       traceback.format_exc())
        finally:
            if not self._ended_on_purpose and self._failure is None:
                self._failure = RuntimeError("the serving loop returned without a shutdown")
            self._stop.set()

    def start(self):
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def join(self):
        while self._thread.is_alive():
            self._thread.join(0.5)
        if self._failure is not None:
            raise RuntimeError(f"{self.name}: the service ended unexpectedly: {type(self._failure).__name__}: "
                               f"{self._failure}") from self._failure

    def stop(self):
        self._ended_on_purpose = True
        self._stop.set()
        self.join()

    def _serve_one(self):
        """Receives and handles one message; a message it cannot decode or handle is dropped, logged
        with its peer and counted, and serving goes on. Socket failures (zmq.ZMQError) escape."""
        message = None
        try:
            got = wire.receive(self._socket, with_identity=True)
            if got is None:
                return  # rejected by wire: counted and logged there
            identity, message = got
            self._handle(identity, message)
        except zmq.ZMQError:
            raise
        except Exception as e:  # a peer with the key sending something this task cannot handle
            self._handling_errors += 1
            kind = message[0][:40] if message is not None else "undecoded"
            _log.warning("%s: dropped a %r message from %s it could not handle (%d so far): %s: %s", self.name,
                         kind, self._socket.last_peer, self._handling_errors, type(e).__name__, e)

    def _reply(self, identity, message):
        wire.send(self._socket, message, identity)

    def _handle_common(self, identity, message):
        """The messages every task answers; False if `message` is not one of them."""
        kind = message[0]
        if kind == "ping":
            nonce = message[1]
            if type(nonce) is not int:
                raise TypeError(f"ping nonce {nonce!r:.40}")
            self._reply(identity, ("pong", nonce, self.incarnation))
        elif kind == "stats":
            self._reply(identity, ("stats", {"rejected": self._socket.rejected,
                                             "handling_errors": self._handling_errors}))
        else:
            return False
        return True

    def _unknown(self, message):
        self._socket.reject(f"unknown: a {message[0][:40]!r} message")


class _WorkerService(_Service):
    kind = "worker"

    def __init__(self, address, task_index, key, num_workers):
        super().__init__(address, task_index, key)
        self.num_workers = num_workers
        self._jobs = queue.Queue()
        # In-process: the executor hands encoded replies to the serving thread, which signs them.
        self._results_in = wire.new_socket(zmq.PAIR, key=None)
        endpoint = f"inproc://mdtrain-worker-results-{id(self)}"
        self._results_in.bind(endpoint)
        self._results_out = wire.new_socket(zmq.PAIR, key=None)
        self._results_out.connect(endpoint)
        self._executor = threading.Thread(target=self._guarded, args=(self._execute,),
                                          name="mdtrain-worker-closures", daemon=True)
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
                    # Signed here: the socket's session counter belongs to this thread.
                    identity, *body = self._results_in.recv_multipart()
                    wire.send_body(self._socket, body, identity)
                if self._socket in ready:
                    self._serve_one()
        finally:
            self._jobs.put(None)
            self._socket.close()

    def _handle(self, identity, message):
        if self._handle_common(identity, message):
            return
        kind = message[0]
        if kind == "run":
            _, closure_id, plan, payload = message
            if type(closure_id) is not int or not isinstance(payload, bytes):
                raise TypeError("a run message is (run, closure id, plan, pickled closure)")
            self._jobs.put((identity, closure_id, plan, payload))
        elif kind == "shutdown":
            self._reply(identity, ("bye",))
            self._ended_on_purpose = True
            self._stop.set()
        else:
            self._unknown(message)

    def _execute(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            identity, closure_id, plan, payload = job
            reply = _run_closure(closure_id, plan, payload)
            try:
                body = wire.encode(reply)
            except TypeError as e:  # cannot happen for the replies _run_closure makes; say so if it does
                body = wire.encode(("error", closure_id, wire.dumps(RuntimeError(str(e))), ""))
            self._results_out.send_multipart([identity, *body])


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
    kind = "ps"

    def __init__(self, address, task_index, key):
        super().__init__(address, task_index, key)
        self._servers = {}  # job id -> ParameterShardServer
        self._host = wire.tcp_address(address, bind=True).rsplit(":", 1)[0]

    def _serve(self):
        try:
            while not self._stop.is_set():
                if self._socket.poll(_POLL_MS):
                    self._serve_one()
        finally:
            self._shutdown()
            self._socket.close()

    def _handle(self, identity, message):
        if self._handle_common(identity, message):
            return
        kind = message[0]
        if kind == "configure":
            _, job_id, spec = message
            self._reply(identity, self._configure(job_id, spec))
        elif kind == "release":
            server = self._servers.pop(message[1], None)
            if server is not None:
                server.stop()
            self._reply(identity, ("released",))
        elif kind == "shutdown":
            self._shutdown()
            self._reply(identity, ("bye",))
            self._ended_on_purpose = True
            self._stop.set()
        else:
            self._unknown(message)

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
                max_staleness=spec["max_staleness"], staleness_policy=spec["staleness_policy"], auth_key=self._key)
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
    """`python -m mdtrain._ps.task`: the task TF_CONFIG names, until the chief ends the job. Raises
    if the task cannot start or its service ends other than by the chief's shutdown."""
    resolver = _cluster.TFConfigClusterResolver()
    server = Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id)
    _log.info("%s %d listening on %s (pid %d)", resolver.task_type, resolver.task_id, server.target, os.getpid())
    server.join()
