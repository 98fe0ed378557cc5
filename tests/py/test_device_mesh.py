"""tf.keras.distribution: DeviceMesh and list_devices with Keras 3's names and behaviour."""
import numpy as np
import pytest

import mdtrain as tf
from mdtrain import _core

distribution = tf.keras.distribution


def test_list_devices_uses_keras_spelling(logical_cpus):
    logical_cpus(4)
    assert distribution.list_devices() == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    assert distribution.list_devices("cpu") == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    assert distribution.list_devices("CPU") == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    assert distribution.list_devices("gpu") == [f"gpu:{i}" for i in range(_core.cuda_device_count())]
    assert distribution.list_devices("tpu") == []
    with pytest.raises(ValueError, match="device_type"):
        distribution.list_devices("xpu")


def test_mesh_defaults_to_every_device_row_major(logical_cpus):
    logical_cpus(4)
    mesh = distribution.DeviceMesh((2, 2), ["batch", "model"])
    assert mesh.shape == (2, 2)
    assert mesh.axis_names == ["batch", "model"]
    assert isinstance(mesh.devices, np.ndarray)
    assert mesh.devices.shape == (2, 2)
    assert mesh.devices.tolist() == [["cpu:0", "cpu:1"], ["cpu:2", "cpu:3"]]
    assert repr(mesh) == "<DeviceMesh shape=(2, 2), axis_names=['batch', 'model']>"


def test_mesh_accepts_keras_and_tf_device_names(logical_cpus):
    logical_cpus(4)
    mesh = distribution.DeviceMesh([4], ["batch"], devices=["cpu:3", "/device:CPU:2", "/cpu:1", "CPU:0"])
    assert mesh.devices.tolist() == ["cpu:3", "/device:CPU:2", "/cpu:1", "CPU:0"]  # kept as given, like Keras
    assert mesh._core.devices == ["/device:CPU:3", "/device:CPU:2", "/device:CPU:1", "/device:CPU:0"]
    logical = tf.config.list_logical_devices("CPU")
    mesh = distribution.DeviceMesh((2,), ["batch"], devices=logical[:2])
    assert mesh.devices.tolist() == [d.name for d in logical[:2]]


def test_mesh_reshapes_devices_of_any_shape(logical_cpus):
    logical_cpus(4)
    mesh = distribution.DeviceMesh((4,), ["batch"], devices=np.array([["cpu:0", "cpu:1"], ["cpu:2", "cpu:3"]]))
    assert mesh.devices.tolist() == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]


def test_mesh_groups_follow_the_cpp_mesh(logical_cpus):
    logical_cpus(8)
    mesh = distribution.DeviceMesh((2, 2, 2), ["batch", "pipe", "model"])
    core = mesh._core
    assert core.coordinates(5) == [1, 0, 1]
    assert core.device_index([1, 1, 0]) == 6
    assert core.axis_split("model", 5) == (2, 1)
    assert core.axes_split(["batch", "pipe"], 5) == (1, 2)
    assert core.axis_group("batch", 6) == [2, 6]
    assert core.axes_group(["pipe", "batch"], 5) == [1, 3, 5, 7]


@pytest.mark.parametrize("shape, axis_names, devices, message", [
    ((), [], None, r"shape and axis_names cannot be empty"),
    ((2, 2), ["batch"], None, r"same length.*shape=\(2, 2\), axis_names=\['batch'\]"),
    ((2, 3), ["batch", "model"], None, r"shape=\(2, 3\); devices.shape=\(4,\)"),
    ((3,), ["batch"], ["cpu:0", "cpu:1"], r"shape=\(3,\); devices.shape=\(2,\)"),
    ((2, 2), ["batch", "batch"], None, r"\[mesh\] axis_names \['batch', 'batch'\] repeats 'batch'"),
    ((2, 2), ["batch", ""], None, r"\[mesh\] axis_names .* empty name"),
    ((2, 0), ["batch", "model"], None, r"shape must be .* positive integers, got shape=\(2, 0\)"),
    ((2.0,), ["batch"], None, r"shape must be .* positive integers"),
    ((2,), "batch", None, r"axis_names must be a list of strings"),
    ((2,), [0], None, r"axis_names must be strings"),
    ((2,), ["batch"], ["cpu:0", "cpu:0"], r"\[mesh\] devices must be distinct: /device:CPU:0"),
    ((2,), ["batch"], ["cpu:0", "cpu:9"], r"devices: 'cpu:9' does not exist. Available devices: cpu:0, .*cpu:3"),
    ((2,), ["batch"], ["cpu:0", "tpu:0"], r"devices: \[device\] cannot parse device name 'tpu:0'"),
    ((2,), ["batch"], ["cpu:0", 7], r"devices must hold device names"),
])
def test_mesh_errors_name_the_argument(logical_cpus, shape, axis_names, devices, message):
    logical_cpus(4)
    with pytest.raises(ValueError, match=message):
        distribution.DeviceMesh(shape, axis_names, devices)


def test_core_mesh_errors():
    with pytest.raises(ValueError, match=r"\[mesh\] no axis named 'pipe'; the mesh's axes are \['batch'\]"):
        _core.DeviceMesh([2], ["batch"], ["cpu:0", "cpu:1"]).axis_index("pipe")
    with pytest.raises(IndexError, match=r"\[mesh\] device_index 2 is outside a mesh of 2 devices"):
        _core.DeviceMesh([2], ["batch"], ["cpu:0", "cpu:1"]).coordinates(2)
    with pytest.raises(ValueError, match=r"\[mesh\] the last axis of shape \[2, 4\] \(size 4\) must divide"):
        _core.DeviceMesh.for_workers([2, 4], ["batch", "model"], 4, ["cpu:0", "cpu:1"])
    mesh = _core.DeviceMesh.for_workers([4, 2], ["batch", "model"], 2, ["cpu:0", "cpu:1", "cpu:2", "cpu:3"])
    assert (mesh.num_devices, mesh.num_workers, mesh.local_device_count) == (8, 2, 4)
    assert [mesh.worker_of(d) for d in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert mesh.devices[5] == "/device:CPU:1"
