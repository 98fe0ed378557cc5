"""Files no one here wrote (issue 34, classes 4, 5, 7 and 9): HDF5 that reaches outside itself, zip
bombs and files declaring huge datasets, loader errors of the wrong type, input errors naming
nothing, and temporaries left by killed writers.

Every hostile file is built here with h5py/zipfile. Memory bounds are measured in a child process
(its peak RSS, VmHWM), so this process's own allocations do not count."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
import zlib

import h5py
import numpy as np
import pytest

import mdtrain as tf
from mdtrain import _atomic

L = tf.keras.layers
# Children import the mdtrain this process imported (installed, or the tree PYTHONPATH names).
MDTRAIN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(tf.__file__)))
SECRET = b"TOP-SECRET-" + bytes(range(256)) * 4  # recognisable in any dtype it could be read as


def model():
    tf.keras.utils.set_random_seed(0)
    m = tf.keras.Sequential([L.Dense(4, input_shape=(3,)), L.Dense(2)])
    m.compile(optimizer="adam", loss="mse")
    return m


def saved_weights(tmp_path, name="w.weights.h5"):
    path = str(tmp_path / name)
    model().save_weights(path)
    return path


def secret_file(tmp_path):
    path = tmp_path / "secret.bin"
    path.write_bytes(SECRET)
    return str(path)


def assert_untouched(m, before):
    after = m.get_weights()
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    blob = b"".join(np.ascontiguousarray(w).tobytes() for w in after)
    assert SECRET[:16] not in blob and SECRET[16:48] not in blob


def replace_kernel(path, make):
    """Rewrites the first Dense kernel of a weights file with what make(group, name) creates."""
    with h5py.File(path, "a") as f:
        group = f["layers/dense/vars"]
        del group["0"]
        make(group, "0")


def load_refused(m, path, *names):
    before = m.get_weights()
    with pytest.raises(ValueError) as e:
        m.load_weights(path)
    for name in (path, *names):
        assert name in str(e.value), (name, str(e.value))
    assert_untouched(m, before)
    return str(e.value)


# ---- class 4: nothing from outside the file --------------------------------------------------
def test_external_link_is_refused_and_nothing_is_read(tmp_path):
    outside = str(tmp_path / "outside.h5")
    with h5py.File(outside, "w") as f:
        f["kernel"] = np.frombuffer(SECRET[:48], np.float32).reshape(3, 4)
    path = saved_weights(tmp_path)
    replace_kernel(path, lambda g, n: g.__setitem__(n, h5py.ExternalLink(outside, "/kernel")))
    message = load_refused(model(), path, "/layers/dense/vars/0", "external link")
    assert "outside.h5" in message


def test_soft_link_is_refused(tmp_path):
    path = saved_weights(tmp_path)
    replace_kernel(path, lambda g, n: g.__setitem__(n, h5py.SoftLink("/layers/dense_1/vars/0")))
    load_refused(model(), path, "/layers/dense/vars/0", "soft link")


def test_soft_link_to_a_group_is_refused(tmp_path):
    path = saved_weights(tmp_path)
    with h5py.File(path, "a") as f:
        f.move("layers", "real_layers")
        f["layers"] = h5py.SoftLink("/real_layers")
    load_refused(model(), path, "/layers", "soft link")


def test_external_storage_dataset_is_refused_and_the_secret_is_not_read(tmp_path):
    secret = secret_file(tmp_path)
    path = saved_weights(tmp_path)
    replace_kernel(path, lambda g, n: g.create_dataset(n, shape=(3, 4), dtype=np.float32,
                                                       external=[(secret, 0, 48)]))
    load_refused(model(), path, "dataset /layers/dense/vars/0", "external file")


def test_virtual_dataset_is_refused(tmp_path):
    outside = str(tmp_path / "outside.h5")
    with h5py.File(outside, "w") as f:
        f["kernel"] = np.frombuffer(SECRET[:48], np.float32).reshape(3, 4)

    def make(group, name):
        layout = h5py.VirtualLayout(shape=(3, 4), dtype=np.float32)
        layout[:] = h5py.VirtualSource(outside, "kernel", shape=(3, 4))
        group.create_virtual_dataset(name, layout)

    path = saved_weights(tmp_path)
    replace_kernel(path, make)
    load_refused(model(), path, "dataset /layers/dense/vars/0", "virtual dataset")


def test_checkpoint_restore_refuses_external_storage(tmp_path):
    secret = secret_file(tmp_path)
    m = model()
    path = tf.train.Checkpoint(model=m, step=tf.Variable(np.zeros(2, np.float32))).save(str(tmp_path / "ckpt"))
    with h5py.File(path, "a") as f:
        del f["checkpoint/step"]
        f["checkpoint"].create_dataset("step", shape=(2,), dtype=np.float32, external=[(secret, 0, 8)])
        assert f["checkpoint/step"].id.get_create_plist().get_external_count() == 1
    fresh, fresh_step = model(), tf.Variable(np.full(2, 5, np.float32))
    with pytest.raises(ValueError, match="dataset /checkpoint/step.*external file") as e:
        tf.train.Checkpoint(model=fresh, step=fresh_step).restore(path)
    assert path in str(e.value)
    np.testing.assert_array_equal(fresh_step.numpy(), [5, 5])
    assert SECRET[:8] not in fresh_step.numpy().tobytes()


def test_load_model_refuses_an_external_link_inside_the_archive(tmp_path):
    outside = str(tmp_path / "outside.h5")
    with h5py.File(outside, "w") as f:
        f["kernel"] = np.frombuffer(SECRET[:48], np.float32).reshape(3, 4)
    m = model()
    m.save(tmp_path / "m.keras")
    weights = str(tmp_path / "model.weights.h5")
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        z.extract("model.weights.h5", tmp_path)
        config, metadata = z.read("config.json"), z.read("metadata.json")
    replace_kernel(weights, lambda g, n: g.__setitem__(n, h5py.ExternalLink(outside, "/kernel")))
    with zipfile.ZipFile(tmp_path / "bad.keras", "w") as z:
        z.writestr("config.json", config)
        z.writestr("metadata.json", metadata)
        z.write(weights, "model.weights.h5")
    with pytest.raises(ValueError, match=r"bad\.keras.*model\.weights\.h5.*/layers/dense/vars/0.*external link"):
        tf.keras.models.load_model(tmp_path / "bad.keras")


def test_string_kernel_is_refused_naming_the_dataset_and_dtypes(tmp_path):
    path = saved_weights(tmp_path)
    replace_kernel(path, lambda g, n: g.create_dataset(n, data=np.array([["abc"] * 4] * 3, dtype=object),
                                                       dtype=h5py.string_dtype()))
    message = load_refused(model(), path, "dataset /layers/dense/vars/0", "dtype", "(3, 4)")
    assert "object" in message or "|O" in message


def test_wrong_shape_is_refused_naming_expected_and_found(tmp_path):
    path = saved_weights(tmp_path)
    replace_kernel(path, lambda g, n: g.create_dataset(n, data=np.zeros((4, 3), np.float32)))
    load_refused(model(), path, "dataset /layers/dense/vars/0", "(4, 3)", "(3, 4)")


def run_child(code, *args, timeout=240):
    """Runs code in a fresh interpreter; returns (returncode, stdout, stderr). The child prints its
    peak RSS (VmHWM, kB) last."""
    env = dict(os.environ, PYTHONPATH=MDTRAIN_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    prologue = textwrap.dedent("""
        import sys
        def peak_kb():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    """)
    proc = subprocess.run([sys.executable, "-c", prologue + textwrap.dedent(code), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def test_huge_declared_dataset_fails_on_the_shape_check_without_reading(tmp_path):
    path = saved_weights(tmp_path)
    # 2**30 float32s (4 GiB) declared, nothing written: HDF5 would read them as zeros.
    replace_kernel(path, lambda g, n: g.create_dataset(n, shape=(1 << 15, 1 << 15), dtype=np.float32))
    assert os.path.getsize(path) < 64 << 10
    rc, out, err = run_child("""
        import mdtrain as tf
        L = tf.keras.layers
        m = tf.keras.Sequential([L.Dense(4, input_shape=(3,)), L.Dense(2)])
        m.compile(optimizer="adam", loss="mse")
        base = peak_kb()
        try:
            m.load_weights(sys.argv[1])
        except ValueError as e:
            print("ValueError", e)
        print(peak_kb() - base)
    """, path)
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert lines[0].startswith("ValueError") and "/layers/dense/vars/0" in lines[0] and "(32768, 32768)" in lines[0]
    assert int(lines[-1]) < 100 * 1024, f"peak RSS grew by {lines[-1]} kB"


@pytest.mark.parametrize("inflated,why", [(20000, "inflates past its 48 bytes"), (64 << 20, "stored in")])
def test_deflate_bomb_chunk_is_refused(tmp_path, inflated, why):
    """A 48-byte chunk whose deflate stream inflates to more: HDF5's inflate would grow its
    buffer to whatever the stream holds."""
    path = saved_weights(tmp_path)

    def make(group, name):
        group.create_dataset(name, shape=(3, 4), dtype=np.float32, chunks=(3, 4), compression="gzip")
        group[name].id.write_direct_chunk((0, 0), zlib.compress(bytes(inflated), 9))

    replace_kernel(path, make)
    load_refused(model(), path, "dataset /layers/dense/vars/0", why)


def test_a_cyclic_local_heap_free_list_is_refused_before_hdf5_reads_it(tmp_path):
    """A group's local heap whose free list points back at itself: HDF5 allocates a node per entry
    and never stops (a fuzzer's 19 KB file took 2 GB)."""
    path = saved_weights(tmp_path)
    data = bytearray(open(path, "rb").read())
    at = data.find(b"HEAP")
    while at >= 0:
        free, segment = (int.from_bytes(data[at + k:at + k + 8], "little") for k in (16, 24))
        if free != 1:  # a heap with a free block: its "next" points at the block itself
            data[segment + free:segment + free + 8] = free.to_bytes(8, "little")
            break
        at = data.find(b"HEAP", at + 4)
    assert at >= 0, "no local heap with free space in the file h5py wrote"
    open(path, "wb").write(bytes(data))
    load_refused(model(), path, f"local heap at byte {at}", "runs in a cycle")


# ---- class 5: zip bombs ----------------------------------------------------------------------
def keras_parts(tmp_path):
    model().save(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        return {n: z.read(n) for n in z.namelist()}


def write_bomb(path, parts, member, size):
    """An archive whose `member` is `size` zero bytes, deflated (written in chunks)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in parts.items():
            if name != member:
                z.writestr(name, data)
        with z.open(member, "w", force_zip64=True) as f:
            chunk = bytes(1 << 20)
            for _ in range(size >> 20):
                f.write(chunk)


@pytest.mark.parametrize("member", ["model.weights.h5", "config.json"])
def test_zip_bomb_is_refused_with_bounded_memory(tmp_path, member):
    path = str(tmp_path / "bomb.keras")
    write_bomb(path, keras_parts(tmp_path), member, 1 << 30)
    assert os.path.getsize(path) < 4 << 20
    rc, out, err = run_child("""
        import mdtrain as tf
        try:
            tf.keras.models.load_model(sys.argv[1])
        except ValueError as e:
            print("ValueError", e)
        print(peak_kb())
    """, path)
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert lines[0].startswith("ValueError") and member in lines[0] and "bomb.keras" in lines[0], lines
    assert int(lines[-1]) < 300 * 1024, f"peak RSS {lines[-1]} kB"


def test_member_lying_about_its_size_is_refused(tmp_path):
    parts = keras_parts(tmp_path)
    path = tmp_path / "liar.keras"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        for name, data in parts.items():
            z.writestr(name, data)
    # The central directory and local header of config.json claim fewer bytes than stored.
    raw = bytearray(path.read_bytes())
    size = len(parts["config.json"])
    import struct

    for signature, offset in ((b"PK\x01\x02", 24), (b"PK\x03\x04", 22)):
        start = 0
        while (at := raw.find(signature, start)) >= 0:
            start = at + 4
            name_len = struct.unpack_from("<H", raw, at + (28 if signature == b"PK\x01\x02" else 26))[0]
            name_at = at + (46 if signature == b"PK\x01\x02" else 30)
            if raw[name_at:name_at + name_len] == b"config.json":
                struct.pack_into("<I", raw, at + offset, size // 2)
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"liar\.keras.*config\.json"):
        tf.keras.models.load_model(path)


# ---- class 7: loader errors ------------------------------------------------------------------
def archive_with_config(tmp_path, config_text, name="c.keras"):
    parts = keras_parts(tmp_path)
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as z:
        for member, data in parts.items():
            z.writestr(member, config_text if member == "config.json" else data)
    return path


@pytest.mark.parametrize("where", ["layer", "initializer", "optimizer", "loss", "metric"])
def test_dunder_class_name_instantiates_nothing(tmp_path, where):
    config = json.loads(keras_parts(tmp_path)["config.json"])
    dense = config["config"]["layers"][1]
    target = {"layer": dense, "initializer": dense["config"]["kernel_initializer"],
              "optimizer": config["compile_config"]["optimizer"]}.get(where)
    if where == "loss":
        config["compile_config"]["loss"] = target = {"class_name": "__class__", "config": {}}
    elif where == "metric":
        config["compile_config"]["metrics"] = [target := {"class_name": "__class__", "config": {}}]
    target["class_name"] = "__class__"
    # Refused by the registry lookup, before anything is called: no error from instantiating a
    # module type (its __init__ would complain about the config's keyword arguments).
    with pytest.raises(ValueError, match=r"c\.keras.*'__class__' is not supported") as e:
        tf.keras.models.load_model(archive_with_config(tmp_path, json.dumps(config)))
    assert e.value.__cause__ is None and "module" not in str(e.value)


def test_module_attribute_class_name_is_refused(tmp_path):
    config = json.loads(keras_parts(tmp_path)["config.json"])
    config["config"]["layers"][1]["config"]["kernel_initializer"]["class_name"] = "get"
    with pytest.raises(ValueError, match="'get' is not supported"):
        tf.keras.models.load_model(archive_with_config(tmp_path, json.dumps(config)))


def test_deeply_nested_config_is_a_value_error_naming_config_json(tmp_path):
    for depth in (200, 100000):
        path = archive_with_config(tmp_path, "[" * depth + "]" * depth, name=f"deep{depth}.keras")
        with pytest.raises(ValueError, match=rf"deep{depth}\.keras.*config\.json"):
            tf.keras.models.load_model(path)


@pytest.mark.parametrize("config", [
    "not json", '"a string"', '{"class_name": "Sequential", "config": 5}',
    '{"class_name": "Sequential", "config": {"layers": [5]}}',
    '{"class_name": "Sequential", "config": {"layers": [{"class_name": "Dense", "config": {"units": "x"}}]}}',
    '{"class_name": "Sequential", "config": {"layers": [{"class_name": "InputLayer", "config": {}}]}}',
    '{"class_name": "Functional", "config": {"layers": [{"class_name": "Dense", "inbound_nodes": [{}]}]}}',
    '{"class_name": "Sequential", "config": {"layers": [{"class_name": ["Dense"]}]}}',
])
def test_malformed_configs_are_value_errors_naming_the_member(tmp_path, config):
    with pytest.raises(ValueError, match=r"c\.keras.*config\.json|c\.keras.*not supported"):
        tf.keras.models.load_model(archive_with_config(tmp_path, config))


def test_corrupt_archive_is_a_value_error_naming_the_file(tmp_path):
    good = tmp_path / "m.keras"
    model().save(good)
    raw = bytearray(good.read_bytes())
    raw[len(raw) // 2:len(raw) // 2 + 64] = bytes(64)
    bad = tmp_path / "corrupt.keras"
    bad.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"corrupt\.keras"):
        tf.keras.models.load_model(bad)


def test_dataset_yielding_none_names_x_and_the_batch():
    m = model()

    def gen():
        yield np.zeros((2, 3), np.float32), np.zeros((2, 2), np.float32)
        yield None

    ds = tf.data.Dataset.from_tensor_slices(np.zeros((4, 3), np.float32)).batch(2).map(
        lambda x: None)
    with pytest.raises(ValueError, match=r"fit: x \(a dataset\) yielded NoneType at batch 0"):
        m.fit(ds, epochs=1, verbose=0)
    with pytest.raises(TypeError, match=r"^x is a generator"):
        m.fit(gen(), epochs=1, verbose=0)


def test_dataset_batch_of_mismatched_lengths_names_the_batch():
    m = model()
    ds = tf.data.Dataset.from_tensor_slices(np.zeros((4, 3), np.float32)).batch(2).map(
        lambda x: (x, np.zeros((3, 2), np.float32)))
    with pytest.raises(ValueError, match=r"fit: x \(a dataset\) batch 0 has 2 inputs .* and 3 labels"):
        m.fit(ds, epochs=1, verbose=0)


# ---- class 9: temporaries of killed writers ----------------------------------------------------
def test_temporary_of_a_killed_save_is_removed_by_the_next_save(tmp_path):
    target = str(tmp_path / "m.keras")
    ready = str(tmp_path / "ready")
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, sys, time
        import mdtrain as tf
        from mdtrain.keras import _keras_weights
        L = tf.keras.layers
        m = tf.keras.Sequential([L.Dense(64, input_shape=(64,)), L.Dense(2)])
        m.compile(optimizer="adam", loss="mse")
        write = _keras_weights.write
        def stuck(*args, **kwargs):
            write(*args, **kwargs)
            open(sys.argv[2], "w").close()
            time.sleep(600)
        _keras_weights.write = stuck
        m.save(sys.argv[1])
    """), target, ready], env=dict(os.environ, PYTHONPATH=MDTRAIN_DIR))
    try:
        for _ in range(1200):
            if os.path.exists(ready) or child.poll() is not None:
                break
            time.sleep(0.1)
        assert os.path.exists(ready), "the child never reached the write"
        left = [n for n in os.listdir(tmp_path) if n.startswith("m.keras.tmp.")]
        assert len(left) == 2 and all(f".tmp.{child.pid}." in n for n in left), left  # archive + weights scratch
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert not os.path.exists(target)
    m = model()
    m.save(target)
    assert [n for n in os.listdir(tmp_path) if n.startswith("m.keras")] == ["m.keras"]
    loaded = tf.keras.models.load_model(target)
    for a, b in zip(m.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_stale_temporaries_of_every_writer_are_removed(tmp_path):
    """save_weights and Checkpoint writes clean dead writers' temporaries (C++ ones included: same
    names); live writers' and other files are kept."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    names = {"w.weights.h5": model().save_weights, "ckpt-1.weights.h5": tf.train.Checkpoint(model=model()).write}
    for name, write in names.items():
        stale = tmp_path / f"{name}.tmp.{dead.pid}.0"
        alive = tmp_path / f"{name}.tmp.{os.getppid()}.7"
        mine_stale = tmp_path / f"{name}.tmp.{os.getpid()}.999999"  # our pid, not being written: stale
        other = tmp_path / f"{name}.tmp.notapid"
        for p in (stale, alive, mine_stale, other):
            p.write_bytes(b"x" * 1000)
        write(str(tmp_path / name[:-len(".weights.h5")]) if name.startswith("ckpt") else str(tmp_path / name))
        assert not stale.exists() and not mine_stale.exists()
        assert alive.exists() and other.exists()
        assert (tmp_path / name).exists()


def test_atomic_path_keeps_the_old_file_on_error(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with _atomic.atomic_path(target) as tmp:
            with open(tmp, "w") as f:
                f.write("new")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]
