"""The lifecycle of a parameter-server job (issue #34, class 3): closures fail, naming the workers,
when no worker is left for worker_rejoin_timeout seconds; SIGTERM or SIGKILL of the launcher leaves
no task or chief running and no port held; a task that ends normally is never started again; the
tasks and the chief share one job secret, a 0600 file removed with the cluster; the launcher's
counts are bounded. What is about processes runs in subprocesses, and is observed through /proc."""
import json
import math
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

import pytest

import mdtrain as tf
from mdtrain import _core, launch
from mdtrain._ps import job_secret
from mdtrain._ps.coordinator import ClusterCoordinator, WorkersUnavailableError
from mdtrain._ps.local_cluster import LocalCluster, free_ports

pytestmark = pytest.mark.skipif(not _core.zmq_available(), reason="mdtrain was built without ZeroMQ (libzmq3-dev)")

# Children import the mdtrain this process imported (installed, or the tree PYTHONPATH names).
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(tf.__file__)))
A_SECRET = "s3cret-of-this-test-0123456789abcdef"
HANG_GUARD_SECONDS = 180  # a subprocess that runs this long hangs: the test fails instead of waiting


def child_env(**extra):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop(job_secret.ENV, None)
    env.pop(job_secret.INSECURE_ENV, None)
    env.update(extra)
    return env


def resolver_for(cluster_dict):
    return tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster_dict),
                                                                task_type="chief", task_id=0)


def proc_alive(pid):
    """Whether pid is a running process (a zombie has ended: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def children_of(pid):
    """{child pid: its command line} from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    found[int(entry)] = f.read().replace(b"\0", b" ").decode()
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return found


def environ_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)


def ports_free(addresses):
    """Whether each address can be listened on again (SO_REUSEADDR, as the tasks' ZeroMQ sockets bind)."""
    for address in addresses:
        host, port = address.rsplit(":", 1)
        s = socket.socket()
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, int(port)))
            s.listen(1)
        except OSError:
            return False
        finally:
            s.close()
    return True


def assert_ports_freed(addresses):
    """The ports are released within seconds of the tasks ending: /proc shows a process as ended once
    its main thread has, while its other threads (ZeroMQ's I/O threads) may still hold the sockets
    for a moment."""
    wait_for(lambda: ports_free(addresses), f"the ports {addresses} to be released", 15)


def wait_for(predicate, what, seconds=HANG_GUARD_SECONDS):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {seconds} s")
        time.sleep(0.05)


# ---- worker_rejoin_timeout ---------------------------------------------------------------------

def test_worker_rejoin_timeout_is_validated(monkeypatch):
    monkeypatch.setenv(job_secret.ENV, A_SECRET)
    cluster = {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}
    PSS = tf.distribute.experimental.ParameterServerStrategy
    for bad in (0, -1.0, math.nan):
        with pytest.raises(ValueError, match="worker_rejoin_timeout must be a positive"):
            PSS(resolver_for(cluster), worker_rejoin_timeout=bad)
    for bad in ("3", None, True):
        with pytest.raises(TypeError, match="worker_rejoin_timeout must be a number of seconds"):
            PSS(resolver_for(cluster), worker_rejoin_timeout=bad)
    with pytest.raises(ValueError, match="worker_timeout must be a positive finite"):
        PSS(resolver_for(cluster), worker_timeout=math.inf)
    monkeypatch.setenv("MDTRAIN_PS_WORKER_TIMEOUT", "ten")
    with pytest.raises(ValueError, match="MDTRAIN_PS_WORKER_TIMEOUT must be a positive number"):
        PSS(resolver_for(cluster))


def test_closures_fail_naming_a_worker_that_never_answered(monkeypatch):
    # No process serves the worker's port: the closure waits worker_rejoin_timeout, then join()
    # and its RemoteValue raise, naming the worker; nothing is left waiting.
    monkeypatch.setenv(job_secret.ENV, A_SECRET)
    worker_port, ps_port = free_ports(2)
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver_for({"worker": [f"127.0.0.1:{worker_port}"], "ps": [f"127.0.0.1:{ps_port}"]}),
        worker_rejoin_timeout=1.5)
    coordinator = ClusterCoordinator(strategy)
    value = coordinator.schedule(lambda: 1)
    raised = []

    def join():
        try:
            coordinator.join()
        except BaseException as e:  # noqa: B902 - the test looks at whatever it was
            raised.append(e)

    waiter = threading.Thread(target=join, daemon=True)
    waiter.start()
    waiter.join(HANG_GUARD_SECONDS)
    try:
        assert not waiter.is_alive(), "join() still waits for a worker that never answered"
        assert len(raised) == 1 and isinstance(raised[0], WorkersUnavailableError), raised
        assert isinstance(raised[0], tf.errors.UnavailableError)  # what TF's coordinator raises
        message = str(raised[0])
        assert f"worker 0 (127.0.0.1:{worker_port})" in message and "never answered" in message
        assert "worker_rejoin_timeout=1.5" in message
        assert [w[:2] for w in raised[0].workers] == [(0, f"127.0.0.1:{worker_port}")]
        with pytest.raises(WorkersUnavailableError, match=f"127.0.0.1:{worker_port}"):
            value.fetch()
        assert coordinator.done()  # nothing queued any more, and the error was raised once
    finally:
        coordinator.shutdown()


DEAD_WORKER_JOB = r"""
import json, logging, os, sys
import numpy as np
import mdtrain as tf
from mdtrain._ps.coordinator import WorkersUnavailableError
from mdtrain._ps.local_cluster import LocalCluster

logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
with LocalCluster(1, 1, max_restarts=0) as cluster:
    os.environ.update(cluster.env)  # this process is the chief: it holds the tasks' secret
    cluster.wait_until_serving()
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster.cluster),
                                                                    task_type="chief", task_id=0)
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, worker_timeout=1.0,
                                                                  worker_rejoin_timeout=3.0)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(4,))])
        model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((32, 4), np.float32), np.ones((32, 2), np.float32)
    model.fit(x, y, batch_size=8, epochs=1, steps_per_epoch=2, verbose=0)  # the worker serves
    cluster.kill("worker", 0)  # for good: max_restarts=0
    report = {"worker": cluster.cluster["worker"][0]}
    try:
        model.fit(x, y, batch_size=8, epochs=1, steps_per_epoch=4, verbose=0)
        report["fit"] = "returned"
    except WorkersUnavailableError as e:
        report["fit"] = str(e)
    value = strategy._coordinator.schedule(lambda: 1)
    try:
        value.fetch()
        report["fetch"] = "returned"
    except WorkersUnavailableError as e:
        report["fetch"] = str(e)
    report["restarts"] = sum(cluster.restarts.values())
    strategy._close()
print("REPORT " + json.dumps(report))
"""


def test_fit_raises_naming_the_worker_dead_for_good():
    out = subprocess.run([sys.executable, "-c", DEAD_WORKER_JOB], env=child_env(), capture_output=True, text=True,
                         timeout=HANG_GUARD_SECONDS)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.split("REPORT ", 1)[1])
    worker = report["worker"]
    for where in ("fit", "fetch"):
        assert f"worker 0 ({worker}) gone for" in report[where], report
        assert "worker_rejoin_timeout=3" in report[where], report
    assert "did not answer for 1 s" in report["fit"]
    assert report["restarts"] == 0
    # The log tells the truth: no other worker takes the closure, it waits for one to rejoin.
    assert "no worker is alive: its closure waits for a worker to rejoin (3 s left)" in out.stderr
    assert "goes to another worker" not in out.stderr


# ---- the launcher's signals ---------------------------------------------------------------------

SLEEPING_CHIEF = r"""
import json, os, sys, time
info = {"pid": os.getpid(), "tf_config": json.loads(os.environ["TF_CONFIG"]),
        "secret": os.environ.get("MDTRAIN_JOB_SECRET")}
with open(sys.argv[1] + ".tmp", "w") as f:
    json.dump(info, f)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


def start_sleeping_job(tmp_path):
    """`python -m mdtrain.launch --ps 1 --workers 1` of a chief that sleeps: the launcher, what the
    chief saw, and the launcher's children (the two tasks and the chief) by pid."""
    script, info_path = tmp_path / "chief.py", tmp_path / "chief.json"
    script.write_text(SLEEPING_CHIEF)
    # The launcher's output goes to a file: the tasks inherit it, and a pipe they hold open would
    # keep a reader waiting as long as they live.
    with open(tmp_path / "launcher.log", "wb") as log:
        launcher = subprocess.Popen([sys.executable, "-m", "mdtrain.launch", "--ps", "1", "--workers", "1",
                                     str(script), str(info_path)], env=child_env(), stdout=log, stderr=log)
    try:
        wait_for(lambda: info_path.exists() or launcher.poll() is not None, "the chief to start")
        assert launcher.poll() is None, (tmp_path / "launcher.log").read_text()[-3000:]
        info = json.loads(info_path.read_text())
        children = children_of(launcher.pid)
    except BaseException:
        launcher.kill()
        raise
    tasks = [pid for pid, cmd in children.items() if "mdtrain._ps.task" in cmd]
    assert len(tasks) == 2 and info["pid"] in children, children
    return launcher, info, tasks


def task_addresses(info):
    cluster = info["tf_config"]["cluster"]
    return cluster["worker"] + cluster["ps"]


def test_sigterm_stops_the_chief_and_every_task_and_frees_the_ports(tmp_path):
    launcher, info, tasks = start_sleeping_job(tmp_path)
    secret = info["secret"]
    # The tasks and the chief hold the same secret, a file only this user can read.
    assert secret and os.path.isabs(secret)
    for pid in tasks:
        assert environ_of(pid)[job_secret.ENV.encode()] == secret.encode()
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(secret)).st_mode) == 0o700

    launcher.send_signal(signal.SIGTERM)
    launcher.wait(HANG_GUARD_SECONDS)
    err = (tmp_path / "launcher.log").read_text()
    assert launcher.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "SIGTERM: stopping the chief and every task" in err
    assert [pid for pid in tasks + [info["pid"]] if proc_alive(pid)] == []
    assert_ports_freed(task_addresses(info))
    assert not os.path.exists(secret) and not os.path.exists(os.path.dirname(secret))


def test_sigkill_of_the_launcher_ends_the_tasks_and_the_chief(tmp_path):
    launcher, info, tasks = start_sleeping_job(tmp_path)
    try:
        launcher.kill()
        launcher.wait(HANG_GUARD_SECONDS)
        everyone = tasks + [info["pid"]]
        # PR_SET_PDEATHSIG: each gets SIGTERM from the kernel as the launcher dies.
        wait_for(lambda: not any(proc_alive(pid) for pid in everyone), "the orphaned tasks and chief to end", 30)
        assert_ports_freed(task_addresses(info))
    finally:
        for pid in tasks + [info["pid"]]:
            if proc_alive(pid):
                os.kill(pid, signal.SIGKILL)
        # A SIGKILLed launcher cannot remove its secret file: the test does.
        job_secret.remove_secret_file(info["secret"])


# ---- the supervisor -----------------------------------------------------------------------------

def test_tasks_that_end_normally_are_never_started_again(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", child_env()["PYTHONPATH"])
    monkeypatch.delenv(job_secret.ENV, raising=False)
    monkeypatch.delenv(job_secret.INSECURE_ENV, raising=False)
    with LocalCluster(1, 1) as cluster:  # this process's environment: it is the chief, with the secret
        assert os.environ[job_secret.ENV] == cluster.env[job_secret.ENV]
        cluster.wait_until_serving()
        # A task that dies is started again (once: the one kill).
        cluster.kill("ps", 0)
        cluster.check_tasks()
        assert cluster.restarts == {("ps", 0): 1}
        cluster.wait_until_serving()
        first = {key: proc.pid for key, proc in cluster.processes.items()}
        # The chief's strategy ends the job: the tasks exit 0 by themselves.
        tf.distribute.experimental.ParameterServerStrategy(resolver_for(cluster.cluster)).shutdown()
        for proc in cluster.processes.values():
            assert proc.wait(HANG_GUARD_SECONDS) == 0
        cluster.check_tasks()  # one more supervisor pass, after every task ended
        assert cluster.restarts == {("ps", 0): 1}
        assert cluster.finished == {("ps", 0), ("worker", 0)}
        assert {key: proc.pid for key, proc in cluster.processes.items()} == first
    cluster.check_tasks()  # after stop(): nothing starts either
    assert {key: proc.pid for key, proc in cluster.processes.items()} == first
    assert cluster.restarts == {("ps", 0): 1}
    assert job_secret.ENV not in os.environ  # the secret it lent this process went with it


def test_stop_ends_the_tasks_without_restarting_them():
    with LocalCluster(1, 2, env=child_env()) as cluster:
        cluster.wait_until_serving()
        first = {key: proc.pid for key, proc in cluster.processes.items()}
    assert all(proc.returncode is not None for proc in cluster.processes.values())
    cluster.check_tasks()
    assert cluster.restarts == {}
    assert {key: proc.pid for key, proc in cluster.processes.items()} == first
    assert not any(proc_alive(pid) for pid in first.values())


# ---- the job secret -----------------------------------------------------------------------------

def test_each_cluster_makes_a_private_secret_for_its_tasks_and_chief_and_removes_it():
    with LocalCluster(1, 1, env=child_env()) as cluster:
        secret = cluster.chief_env()[job_secret.ENV]
        assert cluster.env[job_secret.ENV] == secret
        assert json.loads(cluster.chief_env()["TF_CONFIG"])["task"] == {"type": "chief", "index": 0}
        for proc in cluster.processes.values():
            assert environ_of(proc.pid)[job_secret.ENV.encode()] == secret.encode()
        assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
        assert len(job_secret.job_key(cluster.env)) == 32  # a secret the tasks accept
    assert not os.path.exists(secret) and not os.path.exists(os.path.dirname(secret))


def test_a_secret_of_the_caller_is_used_and_kept_and_insecure_makes_none():
    with LocalCluster(1, 1, env=child_env(**{job_secret.ENV: A_SECRET})) as cluster:
        assert cluster.chief_env()[job_secret.ENV] == A_SECRET
        for proc in cluster.processes.values():
            assert environ_of(proc.pid)[job_secret.ENV.encode()] == A_SECRET.encode()
    with LocalCluster(1, 1, env=child_env(**{job_secret.INSECURE_ENV: "1"})) as cluster:
        assert job_secret.ENV not in cluster.chief_env()


def test_a_cluster_that_fails_to_start_removes_its_secret(monkeypatch, tmp_path):
    made = []
    real = job_secret.make_secret_file
    monkeypatch.setattr(job_secret, "make_secret_file", lambda: made.append(real()) or made[-1])
    with pytest.raises(FileNotFoundError):
        LocalCluster(1, 1, env=child_env(), python=str(tmp_path / "no-such-python"))
    assert len(made) == 1 and not os.path.exists(made[0])


# ---- the launcher's counts ----------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--ps", "300", "--workers", "1"], "--ps must be at most 256 (processes on one machine), got 300"),
    (["--ps", "1", "--workers", "100000"], "--workers must be at most 256 (processes on one machine), got 100000"),
    (["--ps", "200", "--workers", "100"], "--ps + --workers must be at most 256"),
    (["--ps", "1", "--workers", "1", "--max-restarts", "1000000"], "--max-restarts must be at most 1000"),
    (["--ps", "1", "--workers", "1", "--max-restarts", "-1"], "--max-restarts must be at least 0, got -1"),
    (["--ps", "1e20", "--workers", "1"], "--ps takes an integer, got '1e20'"),
    (["-n", "100000"], "-n must be at most 256 (processes on one machine), got 100000"),
    (["-n", "2", "--devices-per-worker", "100000"], "--devices-per-worker must be at most 256"),
    (["-n", "200", "--devices-per-worker", "100"], "-n x --devices-per-worker must be at most 1024"),
])
def test_launcher_counts_are_bounded(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        launch.main([*argv, "x.py"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_local_cluster_counts_are_bounded():
    with pytest.raises(ValueError, match="num_ps \\+ num_workers must be at most 256.*num_ps=1, num_workers=1000"):
        LocalCluster(1, 1000)
