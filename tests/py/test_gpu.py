"""GPUs as the Python API sees them. The tests marked ``gpu`` need a CUDA device and skip, printing
why, when this process sees none (a CPU-only build, no driver or no GPU); the others check what a
machine without a GPU promises."""
import pytest

import mdtrain as tf
from mdtrain import _core

_GPUS = _core.cuda_device_count()
requires_gpu = pytest.mark.skipif(_GPUS == 0, reason=f"no CUDA device: {_core.cuda_unavailable_reason()}")


def test_gpu_list_is_what_the_driver_reports():
    gpus = tf.config.list_physical_devices("GPU")
    assert len(gpus) == _GPUS
    assert [d.name for d in gpus] == [f"/physical_device:GPU:{i}" for i in range(_GPUS)]
    assert all(d.device_type == "GPU" for d in gpus)
    logical = tf.config.list_logical_devices("GPU")
    assert [d.name for d in logical] == [f"/job:localhost/replica:0/task:0/device:GPU:{i}" for i in range(_GPUS)]


def test_no_gpu_is_an_empty_list_and_a_reason_not_an_error():
    if _GPUS:
        pytest.skip("a GPU is present")
    assert tf.config.list_physical_devices("GPU") == []
    assert tf.config.list_logical_devices("GPU") == []
    # The CPU is still there, and the reason says why there is no GPU.
    assert [d.device_type for d in tf.config.list_physical_devices()] == ["CPU"]
    reason = _core.cuda_unavailable_reason()
    assert reason
    assert "built without CUDA" in reason or "cudaGetDeviceCount" in reason or "no CUDA device" in reason


@pytest.mark.gpu
@requires_gpu
def test_every_visible_gpu_is_listed_once():
    names = [d.name for d in tf.config.list_physical_devices("GPU")]
    assert len(set(names)) == len(names) == _GPUS >= 1
