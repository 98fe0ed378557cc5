"""A parameter-server cluster on this machine: the tasks as processes on loopback ports.

`python -m mdtrain.launch --ps 2 --workers 3 train.py` uses it: it starts the ps and worker
tasks, runs the script as the chief with TF_CONFIG naming the cluster, and supervises the
tasks: one that dies while the chief runs is started again on its address (a worker rejoins,
a parameter server is reloaded by the chief from the last checkpoint), up to `max_restarts`
times each. Tests use it the same way, from Python.
"""
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from mdtrain.config import _cpu_threads_per_local_worker

_log = logging.getLogger("mdtrain")


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
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        for job in ("ps", "worker"):
            for i in range(len(self.cluster[job])):
                self.start(job, i)
        self._supervisor = threading.Thread(target=self._supervise, name="mdtrain-local-cluster", daemon=True)
        self._supervisor.start()

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
        self.processes[(job, index)] = subprocess.Popen([self._python, "-m", "mdtrain._ps.task"], env=env,
                                                        stdout=out or subprocess.DEVNULL, stderr=out or None,
                                                        start_new_session=True)
        if out:
            out.close()

    def _supervise(self):
        while not self._stopping.wait(0.2):
            with self._lock:
                for (job, index), proc in list(self.processes.items()):
                    code = proc.poll()
                    if code is None or self._stopping.is_set():
                        continue
                    count = self.restarts.get((job, index), 0)
                    if not self._restart or count >= self._max_restarts:
                        continue
                    _log.warning("launch: %s %d exited with %s; starting it again on %s", job, index, code,
                                 self.cluster[job][index])
                    self.restarts[(job, index)] = count + 1
                    self.start(job, index)

    def kill(self, job, index, sig=signal.SIGKILL):
        """Kills a task (tests: a machine that dies); the supervisor starts it again if it may."""
        with self._lock:
            proc = self.processes[(job, index)]
            proc.send_signal(sig)
            proc.wait()

    def wait_until_serving(self, timeout=60.0):
        """Waits until every task accepts connections on its port."""
        deadline = time.monotonic() + timeout
        for job in ("ps", "worker"):
            for i, address in enumerate(self.cluster[job]):
                host, port = address.rsplit(":", 1)
                while True:
                    proc = self.processes[(job, i)]
                    if proc.poll() is not None and not self._restart:
                        raise RuntimeError(f"launch: {job} {i} exited with {proc.returncode} before serving")
                    try:
                        socket.create_connection((host, int(port)), timeout=0.5).close()
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"launch: {job} {i} at {address} is not serving after {timeout:g} s")
                        time.sleep(0.05)

    def stop(self):
        self._stopping.set()
        self._supervisor.join()
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
