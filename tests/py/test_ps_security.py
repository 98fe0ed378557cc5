"""ParameterServerStrategy jobs are authenticated and their tasks survive what strangers send.

Frames: signed and checked with the job key (the C++ data endpoint's bytes equal these), forged,
altered, reflected and replayed ones dropped and counted; bodies are JSON, never pickles. The job
secret: refused when missing (unless MDTRAIN_INSECURE_PS=1), too short, or in a file others can
read. Tasks, run as processes: a pickle sent to a worker's or a server's port never runs, junk,
HTTP and replayed frames are dropped while the task keeps serving, a serving loop that fails
exits non-zero and the chief's shutdown exits 0."""
import hashlib
import hmac
import json
import logging
import os
import pickle
import socket
import stat
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import zmq

import mdtrain as tf
from mdtrain import _core
from mdtrain._ps import job_secret, wire
from mdtrain._ps.local_cluster import free_ports

pytestmark = pytest.mark.skipif(not _core.zmq_available(), reason="mdtrain was built without ZeroMQ (libzmq3-dev)")

SECRET = "0123456789abcdef-test-secret"
KEY = hmac.new(SECRET.encode(), b"mdtrain job key v1", hashlib.sha256).digest()
OTHER_KEY = hashlib.sha256(b"another job").digest()


# ---- frames and bodies, in one process ----------------------------------------------------------
@pytest.fixture
def pair():
    """A task's ROUTER (signed replies, checked requests) and a raw DEALER a stranger controls."""
    router = wire.new_socket(zmq.ROUTER, key=KEY)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    raw = wire.context().socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(f"tcp://127.0.0.1:{port}")
    client = wire.new_socket(zmq.DEALER, key=KEY)
    client.connect(f"tcp://127.0.0.1:{port}")
    yield router, raw, client
    for s in (router, raw, client):
        s.close()


def receive(sock, timeout_ms=5000, with_identity=False):
    assert sock.poll(timeout_ms), "nothing arrived"
    return wire.receive(sock, with_identity=with_identity)


def test_frames_are_signed_as_the_contract_says_and_the_cpp_endpoint_signs_the_same_bytes():
    session, body = bytes(range(16)), wire.encode(("ping", 7))
    body = b"".join(bytes(p) for p in body)
    frame = wire.frame_sign(KEY, b"Q", session, 5, body)
    want_tag = hmac.new(KEY, b"mdtrain-frame-v1" + b"Q" + session + (5).to_bytes(8, "little") + body,
                        hashlib.sha256).digest()
    assert frame == want_tag + session + (5).to_bytes(8, "little") + body
    assert wire.frame_sign(KEY, b"R", session, 5, body)[:32] != want_tag  # the direction is signed
    if not hasattr(_core, "frame_sign"):
        pytest.skip("this build of mdtrain._core has no frame_sign binding (the C++ side of the frame format)")
    for direction, counter, payload in ((b"Q", 1, body), (b"R", 2 ** 64 - 1, b""), (b"Q", 123456, bytes(5000))):
        assert _core.frame_sign(KEY, direction, session, counter, payload) == \
            wire.frame_sign(KEY, direction, session, counter, payload)


def test_a_sent_frame_is_tag_session_counter_body_with_counters_from_one(pair):
    router, raw, client = pair
    wire.send(client, ("ping", 1))
    wire.send(client, ("ping", 2))
    frames = []
    for _ in range(2):
        assert router.poll(5000)
        frames.append(router.recv_multipart()[1])
    body = b"".join(bytes(p) for p in wire.encode(("ping", 2)))
    session = frames[0][32:48]
    assert frames[1] == wire.frame_sign(KEY, b"Q", session, 2, body)
    assert frames[0][48:56] == (1).to_bytes(8, "little")


def test_forged_altered_reflected_replayed_and_short_frames_are_dropped_and_counted(pair):
    router, raw, client = pair
    wire.send(client, ("ping", 1))
    identity, message = receive(router, with_identity=True)
    assert message == ("ping", 1)
    session = os.urandom(16)
    body = b"".join(bytes(p) for p in wire.encode(("ping", 2)))
    good = wire.frame_sign(KEY, b"Q", session, 1, body)
    altered = bytearray(good)
    altered[-3] ^= 1
    for frame in (b"thirteen byte", wire.frame_sign(OTHER_KEY, b"Q", session, 1, body), bytes(altered),
                  wire.frame_sign(KEY, b"R", session, 1, body), pickle.dumps(("ping", 3))):
        raw.send(frame)
        assert receive(router) is None
    raw.send(good)
    assert receive(router) == ("ping", 2)
    raw.send(good)  # replayed
    assert receive(router) is None
    raw.send(wire.frame_sign(KEY, b"Q", session, 1, body))  # the same counter again, signed anew
    assert receive(router) is None
    raw.send_multipart([b"a", b"b"])
    assert receive(router) is None
    assert router.rejected == {"short": 2, "tag": 3, "replay": 2, "parts": 1}
    # A signed body that is a pickle is not a message: it is never unpickled.
    raw.send(wire.frame_sign(KEY, b"Q", session, 5, pickle.dumps(("ping", 4))))
    assert receive(router) is None
    assert router.rejected["malformed"] == 1
    # The task's reply verifies on the client; a reply sent back to the task as a request does not.
    wire.send(router, ("pong", 1, "x"), identity)
    assert receive(client) == ("pong", 1, "x")


def test_rejections_are_logged_once_per_peer_and_minute(pair, caplog):
    router, raw, client = pair
    with caplog.at_level(logging.WARNING, logger="mdtrain"):
        for _ in range(5):
            raw.send(b"junk junk junk")
            assert receive(router) is None
    lines = [r for r in caplog.records if "dropped a frame from" in r.getMessage()]
    assert len(lines) == 1 and "127.0.0.1" in lines[0].getMessage()
    assert router.rejected["short"] == 5


def test_replay_window_remembers_the_most_recent_sessions_only():
    window = wire._ReplayWindow(sessions=3)
    assert window.accept(b"a", 1) and window.accept(b"a", 5) and not window.accept(b"a", 5)
    assert not window.accept(b"a", 4)
    for s in (b"b", b"c", b"d"):
        assert window.accept(s, 1)
    assert window.accept(b"a", 1)  # forgotten among newer sessions: the documented limit


def test_bodies_are_json_with_checked_arrays_and_never_carry_objects():
    arrays = [np.arange(12, dtype=np.float32).reshape(3, 4), np.zeros((0, 5)), np.array(3, dtype=np.int64),
              np.array([True, False]), np.asfortranarray(np.ones((2, 3)))]
    message = ("configure", "job", {"layout": (2, [("w", (3, 4), "float32")], [2]), "initial_values": arrays,
                                    "load": None, "rate": 0.5, "flags": [1, "two", None]}, b"\x00\xff")
    body = b"".join(bytes(p) for p in wire.encode(message))
    header_len = int.from_bytes(body[:4], "little")
    json.loads(body[4:4 + header_len])  # the header is plain JSON
    got = wire.decode(body)
    assert got[:2] == ("configure", "job") and got[3] == b"\x00\xff"
    assert got[2]["layout"] == (2, [("w", (3, 4), "float32")], [2])
    assert got[2]["flags"] == [1, "two", None] and got[2]["rate"] == 0.5
    for a, b in zip(got[2]["initial_values"], arrays):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    for bad in (lambda: 1, object(), np.array(["text"]), np.array([object()]), {1: "int key"}, {"$t": 1}):
        with pytest.raises(TypeError):
            wire.encode(("kind", bad))

    def body_of(header, blob=b""):
        h = json.dumps(header).encode()
        return len(h).to_bytes(4, "little") + h + blob

    for header, blob in (({"m": {"$t": ["k", {"$a": 0, "dtype": "|O", "shape": [1]}]}, "b": [8]}, bytes(8)),
                         ({"m": {"$t": ["k", {"$a": 0, "dtype": "<f4", "shape": [3]}]}, "b": [8]}, bytes(8)),
                         ({"m": {"$t": ["k", {"$a": 0, "dtype": "V8", "shape": [1]}]}, "b": [8]}, bytes(8)),
                         ({"m": {"$t": ["k", {"$a": 0, "dtype": "<f4", "shape": [-2, -1]}]}, "b": [8]}, bytes(8)),
                         ({"m": {"$t": ["k", {"$b": 3}]}, "b": [8]}, bytes(8)),
                         ({"m": {"$t": ["k"]}, "b": [9]}, bytes(8)),
                         ({"m": ["not", "a", "tuple"], "b": []}, b""),
                         ({"m": {"$t": [5]}, "b": []}, b""),
                         ({"m": {"$pickle": "x"}, "b": []}, b"")):
        with pytest.raises(wire.MalformedBody):
            wire.decode(body_of(header, blob))
    deep = b"[" * 100000 + b"]" * 100000
    with pytest.raises(wire.MalformedBody):
        wire.decode(len(deep).to_bytes(4, "little") + deep)
    with pytest.raises(wire.MalformedBody):
        wire.decode(b"\xff\xff\xff\x7fshort")


def test_messages_are_bounded_in_size_at_both_ends(monkeypatch):
    monkeypatch.setenv("MDTRAIN_PS_MAX_MESSAGE_BYTES", str(1 << 16))
    with pytest.raises(ValueError, match="over the 65536 bytes.*MDTRAIN_PS_MAX_MESSAGE_BYTES"):
        wire.dumps(bytes(70000))
    router = wire.new_socket(zmq.ROUTER, key=KEY)
    try:
        assert router.getsockopt(zmq.MAXMSGSIZE) == 1 << 16
        port = router.bind_to_random_port("tcp://127.0.0.1")
        client = wire.new_socket(zmq.DEALER, key=KEY)
        client.connect(f"tcp://127.0.0.1:{port}")
        with pytest.raises(ValueError, match="MDTRAIN_PS_MAX_MESSAGE_BYTES"):
            wire.send(client, ("run", 1, None, bytes(70000)))
        raw = wire.context().socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(f"tcp://127.0.0.1:{port}")
        raw.send(bytes(100000))  # ZeroMQ drops the connection of a peer sending more than the bound
        assert not router.poll(500)
        wire.send(client, ("ping", 1))
        assert receive(router) == ("ping", 1)
        for s in (client, raw):
            s.close()
    finally:
        router.close()
    monkeypatch.setenv("MDTRAIN_PS_MAX_MESSAGE_BYTES", "lots")
    with pytest.raises(ValueError, match="MDTRAIN_PS_MAX_MESSAGE_BYTES must be"):
        wire.max_message_bytes()


def test_any_mutation_of_a_body_decodes_or_is_malformed_never_another_error():
    rng = np.random.default_rng(0)
    message = ("configure", "job", {"layout": (2, [("w", (3, 4), "float32")], [2]),
                                    "initial_values": [np.ones((3, 4), np.float32)], "load": None}, b"blob")
    body = bytearray(b"".join(bytes(p) for p in wire.encode(message)))
    outcomes = {"decoded": 0, "malformed": 0}
    for _ in range(3000):
        mutated = bytearray(body)
        for _ in range(int(rng.integers(1, 4))):
            op = rng.integers(0, 3)
            at = int(rng.integers(0, len(mutated)))
            if op == 0:
                mutated[at] = int(rng.integers(0, 256))
            elif op == 1:
                del mutated[at:at + int(rng.integers(1, 8))]
            else:
                mutated[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 8)), dtype=np.uint8))
        try:
            got = wire.decode(bytes(mutated))
        except wire.MalformedBody:
            outcomes["malformed"] += 1
        else:
            assert isinstance(got, tuple) and isinstance(got[0], str)
            outcomes["decoded"] += 1
    assert outcomes["malformed"] > 1000  # the mutations did reach the checks


# ---- the job secret -------------------------------------------------------------------------------
def test_job_key_comes_from_the_secret_or_its_file_and_refuses_unsafe_ones(tmp_path, caplog, monkeypatch):
    assert job_secret.job_key({"MDTRAIN_JOB_SECRET": SECRET}) == KEY
    with pytest.raises(RuntimeError, match="MDTRAIN_JOB_SECRET.*MDTRAIN_INSECURE_PS=1.*mdtrain.launch"):
        job_secret.job_key({})
    with pytest.raises(ValueError, match="MDTRAIN_JOB_SECRET: the job secret has 5 characters"):
        job_secret.job_key({"MDTRAIN_JOB_SECRET": "short"})
    with pytest.raises(ValueError, match="MDTRAIN_INSECURE_PS must be 1"):
        job_secret.job_key({"MDTRAIN_INSECURE_PS": "yes"})
    monkeypatch.setattr(job_secret, "_warned_insecure", False)
    with caplog.at_level(logging.WARNING, logger="mdtrain"):
        assert job_secret.job_key({"MDTRAIN_INSECURE_PS": "1"}) is None
        assert job_secret.job_key({"MDTRAIN_INSECURE_PS": "1"}) is None
    assert sum("UNAUTHENTICATED" in r.getMessage() for r in caplog.records) == 1  # warned once
    # A secret wins over the opt-out.
    assert job_secret.job_key({"MDTRAIN_JOB_SECRET": SECRET, "MDTRAIN_INSECURE_PS": "1"}) == KEY

    path = job_secret.make_secret_file()
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        secret = open(path).read().strip()
        assert len(secret) == 64
        assert job_secret.job_key({"MDTRAIN_JOB_SECRET": path}) == \
            hmac.new(secret.encode(), b"mdtrain job key v1", hashlib.sha256).digest()
    finally:
        job_secret.remove_secret_file(path)
    assert not os.path.exists(os.path.dirname(path))

    leaky = tmp_path / "secret"
    leaky.write_text(SECRET + "\n")
    leaky.chmod(0o640)
    with pytest.raises(ValueError, match=f"{leaky}.*mode 0640"):
        job_secret.job_key({"MDTRAIN_JOB_SECRET": str(leaky)})
    leaky.chmod(0o600)
    assert job_secret.job_key({"MDTRAIN_JOB_SECRET": str(leaky)}) == KEY  # stripped
    with pytest.raises(ValueError, match=f"cannot read the job secret file {tmp_path / 'missing'}"):
        job_secret.job_key({"MDTRAIN_JOB_SECRET": str(tmp_path / "missing")})
    (tmp_path / "short").write_text("abc")
    (tmp_path / "short").chmod(0o600)
    with pytest.raises(ValueError, match=f"MDTRAIN_JOB_SECRET: the job secret in {tmp_path / 'short'} has 3"):
        job_secret.job_key({"MDTRAIN_JOB_SECRET": str(tmp_path / "short")})
    if os.geteuid() == 0:
        os.chown(leaky, 65534, 65534)
        with pytest.raises(ValueError, match=f"{leaky} is owned by uid 65534"):
            job_secret.job_key({"MDTRAIN_JOB_SECRET": str(leaky)})


def test_made_secret_files_differ_and_are_removed_with_their_directory():
    paths = [job_secret.make_secret_file() for _ in range(2)]
    try:
        assert open(paths[0]).read() != open(paths[1]).read()
    finally:
        for p in paths:
            job_secret.remove_secret_file(p)
    assert not any(os.path.exists(os.path.dirname(p)) for p in paths)


def test_server_without_a_secret_refuses_to_start_and_the_opt_out_warns(monkeypatch, caplog):
    port = free_ports(1)[0]
    cluster = {"worker": [f"127.0.0.1:{port}"], "ps": ["127.0.0.1:1"]}
    monkeypatch.delenv("MDTRAIN_JOB_SECRET", raising=False)
    monkeypatch.delenv("MDTRAIN_INSECURE_PS", raising=False)
    with pytest.raises(RuntimeError, match="MDTRAIN_JOB_SECRET"):
        tf.distribute.Server(cluster, job_name="worker", task_index=0)
    with pytest.raises(OSError):  # nothing listens: it refused before binding
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    monkeypatch.setenv("MDTRAIN_INSECURE_PS", "1")
    monkeypatch.setattr(job_secret, "_warned_insecure", False)
    with caplog.at_level(logging.WARNING, logger="mdtrain"):
        server = tf.distribute.Server(cluster, job_name="worker", task_index=0)
    try:
        assert "UNAUTHENTICATED" in caplog.text
        client = wire.new_socket(zmq.DEALER)
        client.connect(server.target)
        wire.send(client, ("ping", 9))
        assert receive(client)[:2] == ("pong", 9)
        client.close()
    finally:
        server.stop()


# ---- tasks as processes ---------------------------------------------------------------------------
def task_env(tmp_path, tf_config, secret=SECRET):
    env = {k: v for k, v in os.environ.items() if k not in ("MDTRAIN_JOB_SECRET", "MDTRAIN_INSECURE_PS")}
    if secret is not None:
        env["MDTRAIN_JOB_SECRET"] = secret
    env.update(TF_CONFIG=json.dumps(tf_config), MDTRAIN_CPU_THREADS="1",
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(tf.__file__)),
                                           env.get("PYTHONPATH", "")]))
    return env


def start_task(tmp_path, job, cluster, code=None, secret=SECRET):
    config = {"cluster": cluster, "task": {"type": job, "index": 0}}
    log = open(tmp_path / f"{job}.log", "wb")
    argv = [sys.executable, "-m", "mdtrain._ps.task"] if code is None else [sys.executable, "-c", code]
    proc = subprocess.Popen(argv, env=task_env(tmp_path, config, secret), stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc


class Client:
    """A chief's side of one task: an authenticated DEALER (a wrong key with key=OTHER_KEY)."""

    def __init__(self, address, key=KEY):
        self.sock = wire.new_socket(zmq.DEALER, key=key)
        self.sock.connect(wire.tcp_address(address))

    def ask(self, message, timeout_ms=20000):
        wire.send(self.sock, message)
        deadline = time.monotonic() + timeout_ms / 1000
        while time.monotonic() < deadline:
            if self.sock.poll(100):
                answer = wire.receive(self.sock)
                if answer is not None:
                    return answer
        return None

    def close(self):
        self.sock.close()


def wait_serving(address, proc, timeout=60.0):
    client = Client(address)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"the task exited with {proc.returncode}"
            if client.ask(("ping", 0), timeout_ms=500) is not None:
                return
        raise AssertionError(f"the task at {address} did not answer a ping within {timeout} s")
    finally:
        client.close()


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    """One worker and one ps task, run as `python -m mdtrain._ps.task` with the job secret."""
    tmp = tmp_path_factory.mktemp("tasks")
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{ports[1]}"]}
    procs = {job: start_task(tmp, job, cluster) for job in ("worker", "ps")}
    try:
        for job, proc in procs.items():
            wait_serving(cluster[job][0], proc)
        yield {job: (cluster[job][0], procs[job]) for job in procs}, tmp
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


class _Marker:
    """A pickle that, when unpickled, creates a file: what a stranger's frame would run."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


def stats(address):
    client = Client(address)
    try:
        answer = client.ask(("stats",))
    finally:
        client.close()
    assert answer is not None and answer[0] == "stats"
    return answer[1]


@pytest.mark.parametrize("job", ["worker", "ps"])
def test_a_pickle_sent_to_a_task_never_runs_and_the_task_keeps_serving(tasks, job, tmp_path):
    (address, proc), _ = tasks[0][job], tasks[1]
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_Marker(marker))
    closure = pickle.dumps((_Marker(marker), (), {}))
    before = stats(address)["rejected"]
    raw = wire.context().socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 1000)
    raw.connect(wire.tcp_address(address))
    session = os.urandom(16)
    run = b"".join(bytes(p) for p in wire.encode(("run", 1, (1 << 20, None), closure)))
    configure = b"".join(bytes(p) for p in wire.encode(("configure", "j", {"layout": evil})))
    raw.send(evil)  # what the old control plane unpickled
    raw.send(pickle.dumps(("run", 1, (1 << 20, None), closure)))
    raw.send(wire.frame_sign(OTHER_KEY, b"Q", session, 1, evil))  # signed with a wrong key
    raw.send(wire.frame_sign(OTHER_KEY, b"Q", session, 2, run))
    raw.send(wire.frame_sign(OTHER_KEY, b"Q", session, 3, configure))
    raw.close()
    wrong = Client(address, key=OTHER_KEY)  # a whole protocol-following client with a wrong key
    assert wrong.ask(("run", 2, (2 << 20, None), closure), timeout_ms=1000) is None
    wrong.close()
    # A holder of the key sending a pickle as the body: not a message, not unpickled.
    holder = wire.context().socket(zmq.DEALER)
    holder.setsockopt(zmq.LINGER, 1000)
    holder.connect(wire.tcp_address(address))
    holder.send(wire.frame_sign(KEY, b"Q", session, 1, evil))
    holder.close()
    # 2 unsigned pickles, 3 frames and 1 request with a wrong key: their tags did not verify; the key
    # holder's pickle is not a message. (Frames on other connections may still be on their way
    # when a stats request arrives: asked again until they are counted.)
    want = {"tag": before.get("tag", 0) + 6, "malformed": before.get("malformed", 0) + 1}
    deadline = time.monotonic() + 10
    while True:
        after = stats(address)["rejected"]  # an authenticated request: still serving
        got = {k: after.get(k, 0) for k in want}
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert got == want
    time.sleep(0.5)  # had anything run, its file would be there by now
    assert not marker.exists()
    assert proc.poll() is None


def test_junk_http_and_replayed_frames_are_dropped_and_the_task_keeps_serving(tasks):
    for job in ("worker", "ps"):
        address, proc = tasks[0][job]
        before = stats(address)
        host, port = address.rsplit(":", 1)
        # HTTP to the port: ZeroMQ's handshake fails and drops the connection; nothing reaches the task.
        with socket.create_connection((host, int(port)), timeout=5) as http:
            http.sendall(b"GET / HTTP/1.0\r\n\r\n")
            http.settimeout(2)
            try:
                while http.recv(4096):
                    pass
            except (ConnectionResetError, socket.timeout):
                pass
        raw = wire.context().socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 1000)
        raw.connect(wire.tcp_address(address))
        raw.send(b"13 bytes junk")
        raw.send_multipart([b"three", b"frame", b"message"])
        # A recorded authenticated ping, replayed twice.
        session = os.urandom(16)
        body = b"".join(bytes(p) for p in wire.encode(("ping", 77)))
        recorded = wire.frame_sign(KEY, b"Q", session, 1, body)
        for _ in range(3):
            raw.send(recorded)
        pongs = []
        while raw.poll(2000):
            pongs.append(raw.recv())
        raw.close()
        assert len(pongs) == 1  # the first one was answered, the replays were not
        # An authenticated request the task cannot handle: dropped, counted, serving goes on.
        client = Client(address)
        assert client.ask(("ping", "not a number"), timeout_ms=1000) is None
        assert client.ask(("no such kind",), timeout_ms=1000) is None
        answer = client.ask(("ping", 5))
        client.close()
        assert answer[:2] == ("pong", 5)
        after = stats(address)
        rejected = {k: after["rejected"].get(k, 0) - before["rejected"].get(k, 0) for k in after["rejected"]}
        assert rejected["short"] == 1 and rejected["parts"] == 1 and rejected["replay"] == 2
        assert rejected["unknown"] == 1
        assert after["handling_errors"] - before["handling_errors"] == 1
        assert proc.poll() is None


def test_a_task_without_a_secret_exits_non_zero_naming_the_variable(tmp_path):
    port = free_ports(1)[0]
    proc = start_task(tmp_path, "worker", {"worker": [f"127.0.0.1:{port}"], "ps": ["127.0.0.1:1"]}, secret=None)
    assert proc.wait(120) == 1
    assert "MDTRAIN_JOB_SECRET" in (tmp_path / "worker.log").read_text()


def test_the_chiefs_shutdown_exits_zero_and_a_failing_serving_loop_exits_non_zero(tmp_path):
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{ports[1]}"]}
    ps = start_task(tmp_path, "ps", cluster)
    # The worker's loop fails on its first message as an unexpected error inside it would.
    code = textwrap.dedent("""
        import sys
        from mdtrain._ps import services, task

        def broken(self):
            raise MemoryError("serving loop broke")

        services._WorkerService._serve_one = broken
        sys.exit(task.main())
    """)
    worker = start_task(tmp_path, "worker", cluster, code=code)
    try:
        wait_serving(cluster["ps"][0], ps)
        client = Client(cluster["ps"][0])
        assert client.ask(("shutdown",)) == ("bye",)
        client.close()
        assert ps.wait(60) == 0
        deadline = time.monotonic() + 60
        while worker.poll() is None and time.monotonic() < deadline:
            host, port = cluster["worker"][0].rsplit(":", 1)
            raw = wire.context().socket(zmq.DEALER)
            raw.setsockopt(zmq.LINGER, 0)
            raw.connect(f"tcp://{host}:{port}")
            raw.send(b"anything")
            time.sleep(0.3)
            raw.close()
        assert worker.wait(10) == 1
        log = (tmp_path / "worker.log").read_text()
        assert "serving loop broke" in log and "ended unexpectedly" in log
    finally:
        for p in (ps, worker):
            if p.poll() is None:
                p.kill()
                p.wait()
