"""tf.distribute.coordinator.ClusterCoordinator: the chief schedules closures on the workers.

`schedule(fn, args, kwargs)` queues a closure and returns a `RemoteValue` at once; one thread
per worker sends closures to its worker and waits for the result, sending heartbeats meanwhile.
A worker that stops answering (killed, machine gone) is declared dead after `worker_timeout`
seconds: the closure it was running goes back to the front of the queue for another worker, and
the step token it carries makes the servers apply that step once even if the dead worker had
pushed it already (exact step counts). A dead worker's thread keeps knocking; a worker restarted
on its address rejoins and recreates its per-worker resources on first use. Closures that wait
while no worker answers fail after `worker_rejoin_timeout` seconds with WorkersUnavailableError
naming the workers (a job whose workers are gone for good must not wait forever).

A closure that fails with an error of its own fails its RemoteValue; the first such error is
raised by the next `join()` / `done()` and cancels the closures still queued (as TF does). A
parameter server that stops answering makes the strategy restart every server from the job's
last checkpoint (see ParameterServerStrategy); the closures queued then are cancelled with
`ParameterServersRestored`, which `fit` catches to resume at the checkpoint's step.
"""
import collections
import itertools
import logging
import os
import threading
import time

import zmq

from mdtrain._eager import errors
from mdtrain._input_context import InputContext
from mdtrain._ps import wire
from mdtrain._ps.resources import PerWorkerResource

_log = logging.getLogger("mdtrain")

# Step tokens: closure k owns tokens [(k + 1) << 20, (k + 2) << 20), one per step it runs.
_TOKEN_SHIFT = 20


class ParameterServersRestored(RuntimeError):
    """The parameter servers were restarted from a checkpoint; steps scheduled after it were lost."""

    def __init__(self, message, checkpoint):
        super().__init__(message)
        self.checkpoint = checkpoint


class CancelledError(RuntimeError):
    """A closure that never ran because an earlier one failed (its error is raised by join())."""


class WorkersUnavailableError(errors.UnavailableError, RuntimeError):
    """No worker answered for worker_rejoin_timeout seconds while closures waited for one; the
    waiting closures failed with it. `workers`: (index, address, seconds gone) of each. A
    tf.errors.UnavailableError, as TF's coordinator raises."""

    def __init__(self, message, workers):
        super().__init__(message)
        self.workers = workers


class RemoteValue:
    """The result of a scheduled function: `fetch()` waits for it (and raises its error)."""

    def __init__(self):
        self._ready = threading.Event()
        self._data = None
        self._value = None
        self._error = None

    def _set(self, data):
        self._data = data
        self._ready.set()

    def _fail(self, error):
        if not self._ready.is_set():
            self._error = error
            self._ready.set()

    def fetch(self):
        self._ready.wait()
        if self._error is not None:
            raise self._error
        if self._data is not None:
            self._value, self._data = wire.loads(self._data), None
        return self._value

    get = fetch

    def _done(self):
        return self._ready.is_set()


class _Closure:
    def __init__(self, closure_id, fn, args, kwargs, steps, plan, worker):
        self.id, self.fn, self.args, self.kwargs, self.steps = closure_id, fn, args, kwargs, steps
        self.plan = plan  # (first step token, first start version or None)
        self.worker = worker  # the worker it must run on (deterministic mode), or None
        self.result = RemoteValue()
        self.ps_generation = 0


class _PerWorkerDatasetCreator:
    def __init__(self, dataset_fn):
        self.dataset_fn = dataset_fn

    def __call__(self):
        from mdtrain._ps.services import _state

        fn = self.dataset_fn
        if callable(fn) and not hasattr(fn, "__iter__"):
            try:
                import inspect

                takes_context = len(inspect.signature(fn).parameters) > 0
            except (TypeError, ValueError):
                takes_context = False
            return fn(InputContext(_state.num_workers, _state.task_index)) if takes_context else fn()
        return fn  # a dataset: each worker iterates its own copy


class PerWorkerDataset(PerWorkerResource):
    """A dataset made on each worker by dataset_fn (create_per_worker_dataset); iter() gives the
    per-worker iterator to pass to scheduled functions."""

    def __init__(self, dataset_fn):
        super().__init__(_PerWorkerDatasetCreator(dataset_fn))

    def __iter__(self):
        return PerWorkerIterator(self)


class _IteratorCreator:
    def __init__(self, dataset):
        self.dataset = dataset  # a PerWorkerDataset: resolved on the worker

    def __call__(self):
        return iter(self.dataset)


class PerWorkerIterator(PerWorkerResource):
    """Each worker's iterator over its dataset: pass it to scheduled functions, which call next()."""

    def __init__(self, dataset):
        super().__init__(_IteratorCreator(dataset))

    def __next__(self):
        raise TypeError("a per-worker iterator is consumed on the workers: pass it to coordinator.schedule(fn, "
                        "args=(iterator,)) and call next(iterator) inside fn")


class _WorkerHandle:
    """The chief's side of one worker: a thread that sends it closures."""

    def __init__(self, coordinator, index, address):
        self.coordinator, self.index, self.address = coordinator, index, address
        self.sent = set()  # resources this incarnation of the worker was sent
        self.incarnation = None
        self.alive = True
        self.failures = 0
        # Since when, and why, it has not been answering (read while it is not: dead or never met).
        self.unavailable_since, self.unavailable_why = time.monotonic(), "never answered"
        self._socket = None
        self._nonce = itertools.count()
        self._thread = threading.Thread(target=self._run, name=f"mdtrain-coordinator-worker-{index}", daemon=True)
        self._thread.start()

    def _connect(self):
        if self._socket is not None:
            self._socket.close()
        self._socket = wire.new_socket(zmq.DEALER)
        self._socket.connect(wire.tcp_address(self.address))

    def _ping(self, wait_seconds):
        """The worker's incarnation if it answers within wait_seconds, else None."""
        nonce = next(self._nonce)
        wire.send(self._socket, ("ping", nonce))
        deadline = time.monotonic() + wait_seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._socket.poll(int(left * 1000) + 1):
                return None
            message = wire.receive(self._socket)  # None: a frame that failed authentication, dropped
            if message is not None and message[0] == "pong" and message[1] == nonce:
                return message[2]

    def _run(self):
        self._connect()
        c = self.coordinator
        while not c._stopping:
            if not self.alive or self.incarnation is None:
                self._knock()  # first contact, or a dead worker coming back
                continue
            closure = c._queue_take(self)
            if closure is not None:
                self._dispatch(closure)

    def _knock(self):
        """Pings the worker until it answers: at first contact (it may still be starting) and, on a
        fresh connection each time, when it was declared dead."""
        if not self.alive:
            self._connect()
        incarnation = self._ping(1.0)
        if incarnation is None:
            self.coordinator._check_rejoin_deadline()
            return
        if not self.alive:
            _log.warning("ClusterCoordinator: worker %d (%s) rejoined", self.index, self.address)
        if incarnation != self.incarnation:
            self.sent = set()
        self.alive = True
        self.incarnation = incarnation
        self.coordinator._wake()

    def _declare_dead(self, closure, why):
        self.alive = False
        self.failures += 1
        self.sent = set()  # whatever it holds, the next incarnation must be sent again
        self.unavailable_since, self.unavailable_why = time.monotonic(), why
        c = self.coordinator
        c._requeue(closure)
        left = c._check_rejoin_deadline()
        if closure.result._done():
            fate = "its closure was cancelled"
        elif left is None:
            fate = "its closure goes to another worker"
        else:
            fate = f"no worker is alive: its closure waits for a worker to rejoin ({left:.0f} s left)"
        _log.warning("ClusterCoordinator: worker %d (%s) %s; %s", self.index, self.address, why, fate)

    def _dispatch(self, closure):
        c = self.coordinator
        wire.target.sent = self.sent
        try:
            payload = wire.dumps((closure.fn, closure.args, closure.kwargs))
        except Exception as e:  # a function or argument that cannot travel is the caller's error
            c._closure_failed(closure, TypeError(f"ClusterCoordinator.schedule: cannot send {closure.fn!r} to a "
                                                 f"worker: {type(e).__name__}: {e}"))
            return
        finally:
            wire.target.sent = None
        closure.ps_generation = c._ps_generation
        wire.send(self._socket, ("run", closure.id, closure.plan, payload))
        last_heard = time.monotonic()
        while True:
            if self._socket.poll(int(c._heartbeat_seconds * 1000)):
                message = wire.receive(self._socket)
                if message is None:
                    continue  # a frame that failed authentication (dropped and counted by wire)
                last_heard = time.monotonic()
                kind = message[0]
                if kind == "pong":
                    if message[2] != self.incarnation:  # restarted while running our closure
                        self.incarnation = message[2]
                        self.sent = set()
                        self.failures += 1
                        self._connect()  # drops whatever was still queued for the old process
                        _log.warning("ClusterCoordinator: worker %d (%s) restarted while running a closure; "
                                     "running it again", self.index, self.address)
                        self.coordinator._requeue(closure)
                        return
                    continue
                if message[1] != closure.id:
                    continue  # an answer to a closure given up on earlier
                if kind == "done":
                    closure.result._set(message[2])
                    c._closure_done(closure)
                elif kind == "ps_failure":
                    c._ps_failed(closure, wire.loads(message[2]))
                else:
                    error = wire.loads(message[2])
                    c._closure_failed(closure, error, message[3])
                return
            if time.monotonic() - last_heard > c._worker_timeout:
                self._declare_dead(closure, f"did not answer for {c._worker_timeout:g} s")
                return
            wire.send(self._socket, ("ping", next(self._nonce)))


class ClusterCoordinator:
    """tf.distribute.coordinator.ClusterCoordinator(strategy)."""

    def __init__(self, strategy):
        from mdtrain._ps.strategy import ParameterServerStrategy

        if not isinstance(strategy, ParameterServerStrategy):
            raise ValueError(f"ClusterCoordinator needs a ParameterServerStrategy, got {type(strategy).__name__}")
        if strategy._coordinator is not None:
            raise ValueError("this ParameterServerStrategy already has a ClusterCoordinator")
        strategy._coordinator = self
        self.strategy = strategy
        self._deterministic = strategy._deterministic
        self._worker_timeout = strategy._worker_timeout
        self._heartbeat_seconds = min(0.5, self._worker_timeout / 4)
        self._worker_rejoin_timeout = strategy._worker_rejoin_timeout
        self._starved_since = None  # since when closures wait with no worker answering
        self._lock = threading.Condition()
        self._queue = collections.deque()
        self._inflight = 0
        self._error = None
        self._stopping = False
        self._ids = itertools.count()
        self._planned_steps = 0
        self._version_base, self._steps_base = 0, 0
        self._ps_generation = 0
        self._recovery_lock = threading.Lock()
        self._workers = [_WorkerHandle(self, i, a) for i, a in enumerate(strategy._worker_addresses)]

    # ---- the TF surface ----------------------------------------------------------------------
    def schedule(self, fn, args=None, kwargs=None, steps=1):
        """Queues fn(*args, **kwargs) for a worker; returns its RemoteValue at once. `steps`: the
        training steps fn runs (their tokens; in the deterministic mode, their place in the order)."""
        if not callable(fn):
            raise TypeError(f"ClusterCoordinator.schedule: fn must be callable, got {fn!r}")
        with self._lock:
            self._raise_error_locked()
            k = next(self._ids)
            start = None
            if self._deterministic:
                start = self._version_base + self._planned_steps - self._steps_base
            plan = ((k + 1) << _TOKEN_SHIFT, start)
            worker = k % len(self._workers) if self._deterministic else None
            closure = _Closure(k, fn, tuple(args or ()), dict(kwargs or {}), steps, plan, worker)
            self._planned_steps += steps
            self._queue.append(closure)
            self._lock.notify_all()
        return closure.result

    def join(self):
        """Waits until every scheduled closure finished; raises the first error since the last join."""
        with self._lock:
            while (self._queue or self._inflight) and self._error is None:
                self._lock.wait(0.5)
            while self._inflight:  # after an error: the closures already running finish first
                self._lock.wait(0.5)
            self._raise_error_locked()

    def done(self):
        with self._lock:
            self._raise_error_locked()
            return not self._queue and not self._inflight

    def create_per_worker_dataset(self, dataset_fn):
        """A dataset made on every worker by dataset_fn() or dataset_fn(input_context); pass iter() of it
        to scheduled functions. A dataset object works too: each worker iterates its own copy."""
        return PerWorkerDataset(dataset_fn)

    def fetch(self, val):
        """Fetches RemoteValues (nested in lists, tuples and dicts) as TF's coordinator.fetch does."""
        if isinstance(val, RemoteValue):
            return val.fetch()
        if isinstance(val, (list, tuple)):
            return type(val)(self.fetch(v) for v in val)
        if isinstance(val, dict):
            return {k: self.fetch(v) for k, v in val.items()}
        return val

    @property
    def num_workers(self):
        return len(self._workers)

    def worker_failures(self):
        """How many times each worker was declared dead."""
        return [w.failures for w in self._workers]

    def shutdown(self):
        """Stops the threads (the tasks themselves are ended by the strategy's shutdown)."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()

    # ---- the worker threads' side --------------------------------------------------------------
    def _raise_error_locked(self):
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _queue_take(self, handle):
        with self._lock:
            while not self._stopping and handle.alive:
                for i, closure in enumerate(self._queue):
                    owner = closure.worker
                    if owner is None or owner == handle.index or not self._workers[owner].alive:
                        del self._queue[i]
                        self._inflight += 1
                        return closure
                self._lock.wait(0.5)
            return None

    def _wake(self):
        with self._lock:
            self._lock.notify_all()

    def _requeue(self, closure):
        with self._lock:
            self._inflight -= 1
            if self._error is not None:
                closure.result._fail(CancelledError("cancelled: an earlier closure failed"))
            else:
                self._queue.appendleft(closure)
            self._lock.notify_all()

    def _check_rejoin_deadline(self):
        """Called by the threads of workers that do not answer (each ~1 s while they knock): while
        closures wait and no worker answers, the seconds left before they fail, else None; at the
        deadline the waiting closures fail with WorkersUnavailableError, which join() raises."""
        with self._lock:
            if not self._queue or any(w.alive and w.incarnation is not None for w in self._workers):
                self._starved_since = None
                return None
            now = time.monotonic()
            if self._starved_since is None:
                self._starved_since = now
            left = self._worker_rejoin_timeout - (now - self._starved_since)
            if left > 0:
                return left
            gone = [(w.index, w.address, now - w.unavailable_since) for w in self._workers]
            named = "; ".join(f"worker {w.index} ({w.address}) gone for {now - w.unavailable_since:.1f} s "
                              f"({w.unavailable_why})" for w in self._workers)
            error = WorkersUnavailableError(
                f"ClusterCoordinator: {len(self._queue)} closures waited {now - self._starved_since:.1f} s "
                f"(worker_rejoin_timeout={self._worker_rejoin_timeout:g}) for a worker to rejoin and none answered: "
                f"{named}. Start the workers again on their addresses, or raise worker_rejoin_timeout", gone)
            for queued in self._queue:
                queued.result._fail(error)
            self._queue.clear()
            if self._error is None:
                self._error = error
            self._starved_since = None
            self._lock.notify_all()
            return None

    def _closure_done(self, closure):
        with self._lock:
            self._inflight -= 1
            self._lock.notify_all()

    def _closure_failed(self, closure, error, remote_traceback=None):
        if remote_traceback:
            _log.error("ClusterCoordinator: closure %d failed on a worker:\n%s", closure.id, remote_traceback)
        closure.result._fail(error)
        with self._lock:
            self._inflight -= 1
            self._fail_queued_locked(error)
            self._lock.notify_all()

    def _fail_queued_locked(self, error):
        if self._error is None:
            self._error = error
        for queued in self._queue:
            queued.result._fail(CancelledError(f"cancelled: an earlier closure failed ({error})"))
        self._queue.clear()

    def _ps_failed(self, closure, error):
        """A parameter server did not answer this closure: restart the servers once for everyone."""
        self._closure_failed(closure, self.restart_parameter_servers(error, closure.ps_generation))

    def restart_parameter_servers(self, error, seen_generation=None):
        """Restarts every server from the last checkpoint once per failure, however many closures
        (or the chief) saw it; returns what to raise: ParameterServersRestored, or why it failed."""
        with self._recovery_lock:
            if seen_generation is None or seen_generation == self._ps_generation:
                try:
                    self._last_recovery = self.strategy._restart_parameter_servers(str(error))
                except Exception as e:  # no checkpoint, or a server that does not come back
                    self._last_recovery = e
                self._ps_generation += 1
            return getattr(self, "_last_recovery", error)

    def _rebase(self, version):
        """The servers' version after they were (re)configured: the deterministic order restarts there."""
        with self._lock:
            self._version_base, self._steps_base = version, self._planned_steps


def default_worker_timeout():
    text = os.environ.get("MDTRAIN_PS_WORKER_TIMEOUT", "10")
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"MDTRAIN_PS_WORKER_TIMEOUT must be a positive number of seconds, got {text!r}") from None
