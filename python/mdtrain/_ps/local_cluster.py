"""A parameter-server cluster on this machine: the tasks as processes on loopback ports.

`python -m mdtrain.launch --ps 2 --workers 3 train.py` uses it: it starts the ps and worker
tasks, runs the script as the chief with TF_CONFIG naming the cluster, and supervises the
tasks: one that dies while the chief runs (a non-zero status or a signal) is started again on
its address (a worker rejoins, a parameter server is reloaded by the chief from the last
checkpoint), up to `max_restarts` times each. A task that exits with status 0 has finished (the
chief's strategy shut the job down) and is never started again, nor is anything after `stop()`.
Tests use it the same way, from Python.

Lifetime: every task gets SIGTERM when the process that made the cluster dies, even by SIGKILL
(PR_SET_PDEATHSIG), so a launcher that is killed leaves no task holding its port. Each task runs
in a session of its own, so a terminal's Ctrl-C reaches the launcher and the chief only: the
launcher stops the tasks in order (stop()), after the chief.

The job secret: each cluster makes one (job_secret.make_secret_file: a 0600 file in a 0700
directory) and names it in every task's environment and in `chief_env()` as MDTRAIN_JOB_SECRET,
unless the caller's environment already sets MDTRAIN_JOB_SECRET (used as it is) or
MDTRAIN_INSECURE_PS=1; `stop()` removes the file it made. A cluster made with env=None (this
process's environment) takes this process for its chief, as tests and benchmarks do: it sets
MDTRAIN_JOB_SECRET in os.environ too while it runs (clusters nested in it share that secret, so
stop them first, as `with` blocks do).
"""
import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from mdtrain._ps import job_secret
from mdtrain.config import _cpu_threads_per_local_worker

_log = logging.getLogger("mdtrain")

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_STOP_GRACE_SECONDS = 5.0  # a task that ignores SIGTERM this long is killed
MAX_TASKS = 256  # processes on one machine (as mdtrain.launch's --ps + --workers)


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


# Looked up once, here: the preexec_fn runs between fork and exec of a threaded process, where
# loading a library (dlopen's locks) could deadlock; calling a resolved function cannot.
_prctl = _load_prctl()


def ends_with_this_process():
    """A `preexec_fn` for subprocess.Popen: the child gets SIGTERM when the calling thread's process
    dies, however it dies (SIGKILL included), or None where prctl is missing (not Linux).

    PR_SET_PDEATHSIG fires when the thread that started the child ends, so start children from a
    thread that lives as long as they should (the main thread, or a LocalCluster's supervisor,
    which lives until stop()). If the parent died between fork and prctl, the child was already
    re-parented and would never get the signal: it checks and exits at once."""
    if _prctl is None:
        return None
    parent, sig = os.getpid(), int(signal.SIGTERM)

    def preexec():
        _prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(128 + sig)

    return preexec


def free_ports(count, host="127.0.0.1"):
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tasks_threads(job, num_workers, cores=None):
    """The intra-op threads a task of a LocalCluster gets: the tasks share this machine's cores.
    A parameter server's work is its apply, memory bound, and waiting on its socket: one thread.
    The workers compute: they split the cores among them, as MPI workers of one host do
    (distribute.py). Every task splitting its ops over every core made them fight for the cores
    (the threads spin while they wait): on 2 cores the seed MLP's steps with 2 workers took
    1.0-1.9 ms that way and 0.6-0.8 ms now. The chief only coordinates and is not
    counted. A MDTRAIN_CPU_THREADS the user set is kept."""
    if job == "ps":
        return 1
    return _cpu_threads_per_local_worker(num_workers, cores)


class LocalCluster:
    def __init__(self, num_ps, num_workers, host="127.0.0.1", restart=True, max_restarts=3, env=None,
                 log_dir=None, python=None):
        if num_ps < 1 or num_workers < 1:
            raise ValueError(f"a parameter-server cluster needs at least one ps and one worker, got ps={num_ps}, "
                             f"workers={num_workers}")
        if num_ps + num_workers > MAX_TASKS:
            raise ValueError(f"LocalCluster: num_ps + num_workers must be at most {MAX_TASKS} (processes on one "
                             f"machine), got num_ps={num_ps}, num_workers={num_workers}")
        ports = free_ports(num_ps + num_workers + 1, host)
        self.cluster = {"chief": [f"{host}:{ports[0]}"],
                        "worker": [f"{host}:{p}" for p in ports[1:1 + num_workers]],
                        "ps": [f"{host}:{p}" for p in ports[1 + num_workers:]]}
        self._restart, self._max_restarts = restart, max_restarts
        self._env = dict(os.environ if env is None else env)
        self._log_dir = log_dir
        self._python = python or sys.executable
        self.processes = {}  # (job, index) -> Popen
        self.restarts = {}  # (job, index) -> count
        self.finished = set()  # (job, index) of tasks that exited with status 0: never restarted
        self._handled = {}  # (job, index) -> the Popen whose exit the supervisor dealt with
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._supervisor = None
        self._secret_file = None
        self._exported_secret = False
        self._preexec = ends_with_this_process()
        try:
            self._make_secret(export=env is None)
            for job in ("ps", "worker"):
                for i in range(len(self.cluster[job])):
                    self.start(job, i)
            self._supervisor = threading.Thread(target=self._supervise, name="mdtrain-local-cluster", daemon=True)
            self._supervisor.start()
        except BaseException:  # a signal (the launcher's) or a failed start: no task stays behind
            self.stop()
            raise

    def _make_secret(self, export):
        if self._env.get(job_secret.ENV) or self._env.get(job_secret.INSECURE_ENV) == "1":
            return  # the caller's secret (or its explicit opt-out) holds for the whole job
        self._secret_file = job_secret.make_secret_file()
        self._env[job_secret.ENV] = self._secret_file
        if export:  # this process is the chief: its strategy reads the secret from os.environ
            os.environ[job_secret.ENV] = self._secret_file
            self._exported_secret = True

    @property
    def env(self):
        """The environment the cluster's processes share (the caller's, with MDTRAIN_JOB_SECRET):
        give it to the chief so it holds the tasks' secret."""
        return dict(self._env)

    def chief_env(self):
        """The chief's environment: `env` with TF_CONFIG naming the chief's task."""
        return dict(self._env, TF_CONFIG=self.tf_config("chief", 0))

    def task_env(self, job):
        """The environment a task of `job` ("ps" or "worker") starts with (TF_CONFIG aside), its
        MDTRAIN_CPU_THREADS included."""
        env = dict(self._env)
        env.setdefault("MDTRAIN_CPU_THREADS", str(tasks_threads(job, len(self.cluster["worker"]))))
        return env

    def tf_config(self, job="chief", index=0):
        return json.dumps({"cluster": self.cluster, "task": {"type": job, "index": index}})

    def start(self, job, index):
        """Starts (or starts again) a task on its address."""
        env = self.task_env(job)
        env["TF_CONFIG"] = self.tf_config(job, index)
        out = None
        if self._log_dir:
            os.makedirs(self._log_dir, exist_ok=True)
            out = open(os.path.join(self._log_dir, f"{job}-{index}.log"), "ab")
        try:
            # start_new_session: a terminal's signals go to the launcher, which stops the tasks
            # after the chief; the preexec_fn ends the task if the launcher dies without doing so.
            self.processes[(job, index)] = subprocess.Popen(
                [self._python, "-m", "mdtrain._ps.task"], env=env, stdout=out or subprocess.DEVNULL,
                stderr=out or None, start_new_session=True, preexec_fn=self._preexec)
        finally:
            if out:
                out.close()
        self.finished.discard((job, index))

    def _supervise(self):
        while not self._stopping.wait(0.2):
            self.check_tasks()

    def check_tasks(self):
        """One pass of the supervisor: a task that died (a non-zero status or a signal) while the job
        runs is started again, up to max_restarts times; one that exited with 0 has finished."""
        with self._lock:
            if self._stopping.is_set():
                return
            for key, proc in list(self.processes.items()):
                code = proc.poll()
                if code is None or self._handled.get(key) is proc:
                    continue
                self._handled[key] = proc
                job, index = key
                if code == 0:
                    self.finished.add(key)
                    _log.info("launch: %s %d finished (status 0); not starting it again", job, index)
                    continue
                count = self.restarts.get(key, 0)
                if not self._restart or count >= self._max_restarts:
                    if self._restart:
                        _log.warning("launch: %s %d exited with %s and was started again %d times already "
                                     "(max_restarts): leaving it down", job, index, code, count)
                    continue
                _log.warning("launch: %s %d exited with %s; starting it again on %s", job, index, code,
                             self.cluster[job][index])
                self.restarts[key] = count + 1
                self.start(job, index)

    def _will_restart(self, key, proc):
        code = proc.poll()
        return code is not None and code != 0 and self._restart and self.restarts.get(key, 0) < self._max_restarts

    def kill(self, job, index, sig=signal.SIGKILL):
        """Kills a task (tests: a machine that dies); the supervisor starts it again if it may."""
        with self._lock:
            proc = self.processes[(job, index)]
            proc.send_signal(sig)
            proc.wait()

    def wait_until_serving(self, timeout=60.0):
        """Waits until every task accepts connections on its port; a task that exited and will not be
        started again fails it at once."""
        deadline = time.monotonic() + timeout
        for job in ("ps", "worker"):
            for i, address in enumerate(self.cluster[job]):
                host, port = address.rsplit(":", 1)
                while True:
                    proc = self.processes[(job, i)]
                    if proc.poll() is not None and not self._will_restart((job, i), proc):
                        where = f" (its log: {os.path.join(self._log_dir, f'{job}-{i}.log')})" if self._log_dir else ""
                        raise RuntimeError(f"launch: {job} {i} exited with {proc.returncode} before serving{where}")
                    try:
                        socket.create_connection((host, int(port)), timeout=0.5).close()
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"launch: {job} {i} at {address} is not serving after {timeout:g} s")
                        time.sleep(0.05)

    def stop(self):
        """Ends every task (SIGTERM, then SIGKILL after a grace period) and removes the job secret the
        cluster made. Nothing is started again once it began; calling it again does nothing more."""
        with self._lock:  # between two supervisor passes: no restart can follow
            self._stopping.set()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join()
        procs = list(self.processes.values())
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + _STOP_GRACE_SECONDS
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._secret_file is not None:
            if self._exported_secret and os.environ.get(job_secret.ENV) == self._secret_file:
                del os.environ[job_secret.ENV]
            job_secret.remove_secret_file(self._secret_file)
            self._secret_file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
