"""The parameter server's C++ engine through the bindings (mdtrain._core): two servers on
loopback, two workers, SGD with momentum checked against NumPy, checkpoints across layouts,
and a timeout naming the server. The Python strategy/coordinator are built on these later."""
import json

import numpy as np
import pytest

from mdtrain import _core

pytestmark = pytest.mark.skipif(not _core.zmq_available(), reason="mdtrain was built without ZeroMQ (libzmq3-dev)")

SPECS = [("dense/kernel", [5, 3], "float32"), ("dense/bias", [3], "float32")]


def sgd(lr=0.1, momentum=0.9):
    return _core.make_optimizer(json.dumps({"class_name": "SGD", "config": {"learning_rate": lr, "momentum": momentum}}))


def layout(servers):
    return _core.PsShardLayout.make(servers, SPECS, [min(servers, s[1][0]) for s in SPECS])


def start(servers, initial, **kwargs):
    lay = layout(servers)
    return lay, [_core.ParameterShardServer(lay, s, initial, sgd(), **kwargs) for s in range(servers)]


def test_partitioners_follow_tf_examples():
    assert _core.ps_fixed_shards(3, [2, 4]) == 2
    assert _core.ps_min_size_shards([6, 1], "float32", min_shard_bytes=4, max_shards=2) == 2
    assert _core.ps_max_size_shards([6, 1], "float32", max_shard_bytes=4, max_shards=2) == 2
    assert _core.ps_max_size_shards([6, 1], "float32", max_shard_bytes=4) == 6
    lay = layout(2)
    assert lay.rows[0] == [(0, 3), (3, 5)]
    assert lay.variables[1] == ("dense/bias", (3,), "float32")


def test_two_workers_push_in_order_like_numpy_momentum(tmp_path):
    rng = np.random.default_rng(0)
    initial = [rng.normal(size=s[1]).astype(np.float32) for s in SPECS]
    lay, servers = start(2, initial)
    workers = [_core.ParameterServerClient(lay, [s.endpoint for s in servers], w, timeout=10.0) for w in range(2)]
    values, versions = workers[0].pull()
    for got, want in zip(values, initial):
        np.testing.assert_array_equal(got, want)
    assert versions == [0, 0]
    # NumPy reference of Keras SGD with momentum: m = momentum * m - lr * g; w += m
    w = [x.copy() for x in initial]
    m = [np.zeros_like(x) for x in initial]
    for step in range(4):
        grads = [rng.normal(size=s[1]).astype(np.float32) for s in SPECS]
        status, versions = workers[step % 2].push(grads, versions)
        assert status == ["applied", "applied"]
        for i, g in enumerate(grads):
            m[i] = np.float32(0.9) * m[i] - np.float32(0.1) * g
            w[i] = w[i] + m[i]
    values, versions = workers[1].pull()
    assert versions == [4, 4]
    for got, want in zip(values, w):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert servers[0].stats()["pushes_applied"] == 4
    assert workers[0].stats(1)["pulls"] == 2

    workers[0].save(str(tmp_path))
    ck = _core.read_ps_checkpoint(str(tmp_path))
    assert ck["iterations"] == 4 and ck["optimizer"] == "SGD"
    np.testing.assert_array_equal(ck["variables"]["dense/kernel"][0], values[0])
    assert set(ck["variables"]["dense/kernel"][1]) == {"momentum"}
    lay3, three = start(3, [])
    client3 = _core.ParameterServerClient(lay3, [s.endpoint for s in three], 0)
    client3.load(str(tmp_path))
    for got, want in zip(client3.pull()[0], values):
        np.testing.assert_array_equal(got, want)
    for s in servers + three:
        s.stop()
        assert not s.serving


def test_a_silent_server_times_out_naming_it():
    lay, servers = start(2, [])
    gone = servers[1].endpoint
    servers[1].stop()
    del servers[1]
    client = _core.ParameterServerClient(lay, [servers[0].endpoint, gone], 0, timeout=0.2)
    with pytest.raises(TimeoutError, match=f"ps 1 at {gone} did not answer a pull within 0.2 s"):
        client.pull()


def test_sync_mode_and_bad_arguments():
    lay, servers = start(1, [], synchronous=True, replicas_to_aggregate=2)
    client = _core.ParameterServerClient(lay, [servers[0].endpoint], 0)
    zeros = [np.zeros(s[1], np.float32) for s in SPECS]
    assert client.push(zeros, [0])[0] == ["aggregated"]
    assert client.push(zeros, [0])[0] == ["applied"]
    assert client.push(zeros, [0])[0] == ["dropped (late)"]
    assert servers[0].stats()["pushes_dropped_late"] == 1
    with pytest.raises(ValueError, match="staleness_policy"):
        _core.ParameterShardServer(lay, 0, [], sgd(), staleness_policy="ignore")
    with pytest.raises(ValueError, match="float32"):
        _core.PsShardLayout.make(1, [("x", [2], "int32")], [1])


# ---- authenticated frames (auth_key): the C++ side of the job secret ---------------------------

KEY = bytes(range(32))


def test_frame_sign_is_hmac_sha256_of_the_documented_bytes():
    import hashlib
    import hmac
    import struct
    session, body = bytes(range(0xA0, 0xB0)), b"pull weights"
    for direction in (b"Q", b"R"):
        for counter in (1, 0x0102030405060708, 2**64 - 1):
            head = session + struct.pack("<Q", counter)
            tag = hmac.new(KEY, b"mdtrain-frame-v1" + direction + head + body, hashlib.sha256).digest()
            assert _core.frame_sign(KEY, direction, session, counter, body) == tag + head + body
    with pytest.raises(ValueError, match=r"\[ps\] the frame authentication key must be 32 raw bytes, got 31"):
        _core.frame_sign(KEY[:31], b"Q", session, 1, body)
    with pytest.raises(ValueError, match="direction must be b'Q'"):
        _core.frame_sign(KEY, b"X", session, 1, body)
    with pytest.raises(ValueError, match="session is 16 bytes, got 3"):
        _core.frame_sign(KEY, b"Q", b"abc", 1, body)
    with pytest.raises(TypeError, match="body must be bytes, got str"):
        _core.frame_sign(KEY, b"Q", session, 1, "text")


def test_an_authenticated_server_answers_only_its_key():
    initial = [np.arange(15, dtype=np.float32).reshape(5, 3), np.ones(3, np.float32)]
    lay, servers = start(1, initial, auth_key=KEY)
    endpoints = [servers[0].endpoint]
    good = _core.ParameterServerClient(lay, endpoints, 0, timeout=10.0, auth_key=KEY)
    assert good.authenticated
    values, versions = good.pull()
    np.testing.assert_array_equal(values[0], initial[0])
    assert good.push([np.zeros(s[1], np.float32) for s in SPECS], versions)[0] == ["applied"]
    for intruder in (_core.ParameterServerClient(lay, endpoints, 1, timeout=0.3),
                     _core.ParameterServerClient(lay, endpoints, 2, timeout=0.3, auth_key=bytes(32))):
        with pytest.raises(TimeoutError, match="did not answer a pull"):
            intruder.pull()
        with pytest.raises(TimeoutError, match="did not answer a shutdown"):
            intruder.shutdown()
    assert servers[0].serving and servers[0].version == 1
    stats = servers[0].stats()
    assert stats["frames_rejected"] >= 4 and stats["errors"] == 0 and stats["pulls"] == 1
    assert good.stats(0)["frames_rejected"] >= 4
    servers[0].stop()


def test_auth_key_must_be_32_bytes_or_none():
    lay = layout(1)
    with pytest.raises(ValueError, match="frame authentication key must be 32 raw bytes, got 5"):
        _core.ParameterShardServer(lay, 0, [], sgd(), auth_key=b"short")
    with pytest.raises(TypeError, match="auth_key must be bytes"):
        _core.ParameterServerClient(lay, ["tcp://127.0.0.1:1"], 0, auth_key="a text key of thirty-two chars!!")
    with pytest.raises(ValueError, match="got 33"):
        _core.ParameterServerWorkerStrategy(lay, ["tcp://127.0.0.1:1"], 0, 1.0, auth_key=bytes(33))
    assert not _core.ParameterServerClient(lay, ["tcp://127.0.0.1:1"], 0).authenticated
    _core.ParameterServerWorkerStrategy(lay, ["tcp://127.0.0.1:1"], 0, 1.0, auth_key=KEY)
