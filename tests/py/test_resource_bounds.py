"""Sizes and counts that inputs declare are checked before anything of that size is made (issue 34,
classes 5 and 6): environment thread and device counts at `import mdtrain`, thread-count setters,
num_microbatches, plan()'s global_batch_size, huge sparse model files, and host allocations larger
than the memory the process can still get (MemAvailable, cgroup limit minus usage). Process-level
effects (threads started, peak RSS) are measured in a child process."""
import json
import os
import struct
import subprocess
import sys
import textwrap
import zlib

import pytest

import mdtrain as tf
from mdtrain import _core

PYTHON_DIR = os.path.dirname(os.path.dirname(tf.__file__))
MiB = 1 << 20


def _child(code, env=None, timeout=120):
    """Runs `code` in a fresh interpreter; returns the JSON object it prints last."""
    full_env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    for name in ("MDTRAIN_CPU_THREADS", "MDTRAIN_NUM_CPU_DEVICES"):
        full_env.pop(name, None)
    full_env.update(env or {})
    prelude = textwrap.dedent("""
        import json, sys
        def status(key):
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1])
    """)
    out = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], env=full_env, capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- class 6: environment counts ---------------------------------------------------------------

_IMPORT = """
    try:
        import mdtrain
        result = {"error": None}
    except Exception as e:
        result = {"error": type(e).__name__, "message": str(e)}
    result["threads"] = status("Threads")
    print(json.dumps(result))
"""


@pytest.mark.parametrize("name", ["MDTRAIN_CPU_THREADS", "MDTRAIN_NUM_CPU_DEVICES"])
@pytest.mark.parametrize("value", ["100000", "1e20", "abc", "-3", "0", "100000000000000000000", "4.0"])
def test_a_bad_count_in_the_environment_fails_import_with_a_value_error_naming_it(name, value):
    got = _child(_IMPORT, {name: value})
    assert got["error"] == "ValueError", got
    assert name in got["message"] and repr(value) in got["message"], got
    assert "expected an integer from 1 to" in got["message"], got
    # Nothing started a thread per count: the interpreter's own plus a few of the core's.
    assert got["threads"] <= 8, got


def test_good_counts_in_the_environment_are_taken():
    got = _child("""
        import mdtrain
        print(json.dumps({"devices": len(mdtrain.config.list_logical_devices("CPU")),
                          "threads": mdtrain.config.threading.get_intra_op_parallelism_threads()}))
    """, {"MDTRAIN_CPU_THREADS": "3", "MDTRAIN_NUM_CPU_DEVICES": "2"})
    assert got == {"devices": 2, "threads": 3}


def test_the_thread_setters_are_bounded_and_name_the_argument_and_the_limit():
    limit = tf.config.MAX_CPU_THREADS
    assert limit == max(4 * (os.cpu_count() or 1), 256)
    before = tf.config.threading.get_intra_op_parallelism_threads()
    for setter in ("set_intra_op_parallelism_threads", "set_inter_op_parallelism_threads"):
        for bad in (10**6, 10**20, limit + 1, -1, 2.0):
            with pytest.raises(ValueError, match=rf"{setter}: num_threads must be an integer from 0 to {limit}"):
                getattr(tf.config.threading, setter)(bad)
    assert tf.config.threading.get_intra_op_parallelism_threads() == before


def test_the_core_refuses_a_thread_count_past_the_limit_for_embedders():
    with pytest.raises(ValueError, match=r"\[threads\] the intra-op thread count must be from 1 to"):
        _core.set_cpu_threads(_core.max_cpu_threads() + 1)


def test_logical_device_configuration_is_bounded():
    cpu = tf.config.list_physical_devices("CPU")[0]
    configs = [tf.config.LogicalDeviceConfiguration()] * (tf.config.MAX_CPU_DEVICES + 1)
    with pytest.raises(ValueError, match=r"logical_devices: 257 logical CPU devices exceed the limit of 256"):
        tf.config.set_logical_device_configuration(cpu, configs)
    assert tf.config.get_logical_device_configuration(cpu) is None


# ---- class 5: declared counts -----------------------------------------------------------------

def test_num_microbatches_past_the_limit_is_a_value_error_before_anything_is_made():
    got = _child("""
        import warnings
        import mdtrain as tf
        mesh = tf.keras.distribution.DeviceMesh((2,), ("pipe",), devices=tf.keras.distribution.list_devices()[:2])
        try:
            tf.keras.distribution.PipelineParallel(mesh, num_microbatches=10**8)
            result = {"error": None}
        except Exception as e:
            result = {"error": type(e).__name__, "message": str(e)}
        try:  # the core checks too, for the C++ API
            tf._core.PipelineStrategy(mesh._core, 10**5, "gpipe", [], "pipe", None, False, False)
        except Exception as e:
            result["core"] = type(e).__name__ + ": " + str(e)
        result["hwm_kb"] = status("VmHWM")
        print(json.dumps(result))
    """, {"MDTRAIN_NUM_CPU_DEVICES": "2"}, timeout=60)
    assert got["error"] == "ValueError", got
    assert "num_microbatches=100000000 exceeds the limit of 4096" in got["message"], got
    assert got["core"].startswith("ValueError: [pipeline] num_microbatches (100000) exceeds the limit of 4096"), got
    assert got["hwm_kb"] < 400 * 1024, got


def _seed_mlp_code():
    return """
        import mdtrain as tf
        model = tf.keras.Sequential([tf.keras.Input((784,)), tf.keras.layers.Dense(32, activation="relu"),
                                     tf.keras.layers.Dense(10)])
        model.compile(optimizer="sgd", loss="mse")
    """


def test_plan_global_batch_size_past_the_limit_is_a_value_error_naming_it():
    got = _child(_seed_mlp_code() + """
        from mdtrain.plan import plan
        result = {}
        for b in (10**9, 2**23):
            try:
                plan(model, global_batch_size=b)
                result[str(b)] = None
            except Exception as e:
                result[str(b)] = type(e).__name__ + ": " + str(e)
        result["hwm_kb"] = status("VmHWM")
        print(json.dumps(result))
    """, timeout=60)
    assert got["1000000000"].startswith("ValueError: plan: global_batch_size=1000000000 exceeds the limit of 16777216")
    # 2^23 rows of the MLP's 784 + 32 + 10 floats and their gradients: 55 GiB, beyond this host.
    if (_core.host_memory_available()["bytes"] or 1 << 62) < (2**23) * 8 * 826:
        assert got["8388608"].startswith("ValueError: plan: global_batch_size=8388608 needs at least"), got
        assert "rows fit" in got["8388608"], got
    assert got["hwm_kb"] < 400 * 1024, got


# ---- class 5: model files declaring sizes -------------------------------------------------------

def _model_file(path, tensors, header_len=None):
    """A model file whose header declares `tensors` (dicts as in docs/file_format.md) and whose
    payload is a hole; `header_len` overrides the declared header length."""
    header = json.dumps({"format": "mdtrain.model", "model": {}, "compile": None, "metadata": {},
                         "tensors": tensors}).encode()
    prefix = struct.pack("<8sIIQ", b"MDTRAIN\0", 1, zlib.crc32(header), header_len or len(header))
    with open(path, "wb") as f:
        f.write(prefix + header)
    return (24 + len(header) + 63) // 64 * 64


def _load_in_child(path, timeout=60):
    return _child(f"""
        import mdtrain as tf
        try:
            tf.keras.models.load_model({str(path)!r})
            result = {{"error": None}}
        except Exception as e:
            result = {{"error": type(e).__name__, "message": str(e)}}
        result["hwm_kb"] = status("VmHWM")
        print(json.dumps(result))
    """, timeout=timeout)


def test_a_64_gib_sparse_file_is_a_value_error_naming_it_within_seconds(tmp_path):
    plain = tmp_path / "truncated.mdtrain"
    with open(plain, "wb"):
        pass
    os.truncate(plain, 64 << 30)
    got = _load_in_child(plain)
    assert got["error"] == "ValueError" and str(plain) in got["message"], got

    # A header declaring a 64 GiB tensor over a hole: its checksum is checked without reading the
    # hole (the reader accounts holes as zeros) and does not match.
    huge = tmp_path / "huge_tensor.mdtrain"
    start = _model_file(huge, [{"name": "dense/kernel", "group": "weights", "dtype": "float32",
                                "shape": [1 << 34], "offset": 0, "nbytes": 64 << 30, "crc32": 1}])
    os.truncate(huge, start + (64 << 30))
    got = _load_in_child(huge, timeout=30)
    assert got["error"] == "ValueError", got
    assert str(huge) in got["message"] and "checksum mismatch in tensor 'dense/kernel'" in got["message"], got
    assert got["hwm_kb"] < 400 * 1024, got

    # A header length only a sparse file satisfies.
    long_header = tmp_path / "long_header.mdtrain"
    _model_file(long_header, [], header_len=60 << 30)
    os.truncate(long_header, 64 << 30)
    got = _load_in_child(long_header, timeout=30)
    assert got["error"] == "ValueError", got
    assert str(long_header) in got["message"] and "exceeds the 64 MiB a header may have" in got["message"], got


# ---- class 5: host allocations past the memory left ---------------------------------------------

def test_dense_1e9_is_a_memory_error_naming_the_layer_and_the_bytes():
    got = _child("""
        import mdtrain as tf
        try:
            model = tf.keras.Sequential([tf.keras.Input((784,)), tf.keras.layers.Dense(10**9, name="dense_3")])
            model.compile(optimizer="sgd", loss="mse")
            result = {"error": None}
        except Exception as e:
            result = {"error": type(e).__name__, "message": str(e)}
        result["hwm_kb"] = status("VmHWM")
        print(json.dumps(result))
    """, timeout=60)
    assert got["error"] == "MemoryError", got
    assert 'layer "dense_3" (Dense)' in got["message"], got
    assert "float32 tensor of shape (784, 1000000000) needs 2920.6 GiB (3136000000000 bytes)" in got["message"], got
    assert "MemAvailable" in got["message"], got
    assert got["hwm_kb"] < 400 * 1024, got


def _fake_cgroup(tmp_path, limit, current):
    """/proc and cgroup v2 files under tmp_path: 64 GiB MemAvailable, the job's cgroup at `limit`
    (bytes or "max") with `current` bytes in use."""
    (tmp_path / "meminfo").write_text(f"MemTotal: 70000000 kB\nMemAvailable: {64 << 20} kB\n")
    (tmp_path / "cgroup").write_text("0::/job\n")
    (tmp_path / "mountinfo").write_text("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    job = tmp_path / "root" / "sys" / "fs" / "cgroup" / "job"
    job.mkdir(parents=True, exist_ok=True)
    (job / "memory.max").write_text(f"{limit}\n")
    (job / "memory.current").write_text(f"{current}\n")
    return str(tmp_path / "meminfo"), str(tmp_path / "cgroup"), str(tmp_path / "mountinfo"), str(tmp_path / "root")


def test_a_cgroup_limit_bounds_layer_weights_and_max_means_unlimited(tmp_path):
    sources = _fake_cgroup(tmp_path, 1 << 30, (1 << 30) - 200 * MiB)  # 200 MiB left in the cgroup
    previous = _core._set_host_memory_sources(*sources)
    try:
        assert _core.host_memory_available()["bytes"] == 200 * MiB
        with pytest.raises(MemoryError) as e:
            model = tf.keras.Sequential([tf.keras.Input((784,)), tf.keras.layers.Dense(100000, name="wide")])
            model.compile(optimizer="sgd", loss="mse")
        message = str(e.value)
        assert 'layer "wide" (Dense)' in message and "(784, 100000) needs 299.1 MiB (313600000 bytes)" in message
        assert "200.0 MiB available" in message and "cgroup v2" in message and "memory.max 1.0 GiB" in message
        # Below the large-allocation threshold nothing is checked, whatever is left.
        small = tf.keras.Sequential([tf.keras.Input((784,)), tf.keras.layers.Dense(1000)])
        small.compile(optimizer="sgd", loss="mse")
        # "max": no cgroup limit, MemAvailable (64 GiB here) applies.
        _fake_cgroup(tmp_path, "max", 5 << 30)
        assert _core.host_memory_available()["bytes"] == 64 << 30
        wide = tf.keras.Sequential([tf.keras.Input((784,)), tf.keras.layers.Dense(100000)])
        wide.compile(optimizer="sgd", loss="mse")
        assert wide.count_params() == 784 * 100000 + 100000
    finally:
        _core._set_host_memory_sources(*previous)


def test_the_real_host_memory_figure_is_readable():
    got = _core.host_memory_available()
    assert got["bytes"] is not None and got["bytes"] > 0, got
    assert "MemAvailable" in got["description"], got
