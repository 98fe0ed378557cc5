"""The C++ example (examples/cpp) built against the installed package, as a user would build it.

`python -m mdtrain --cmake-dir` names the directory holding mdtrainConfig.cmake; a standalone
CMake project finds the package there, links mdtrain::mdtrain and runs. Skipped only when
cmake or a C++ compiler is missing.
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mdtrain

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE_DIR = os.path.join(REPO, "examples", "cpp")
EPOCH_LINE = re.compile(r"^epoch (\d+)/(\d+) - loss: ([0-9.]+) - accuracy: ([0-9.]+)$", re.M)


def _compiler():
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cli_cmake_dir():
    out = subprocess.run(
        [sys.executable, "-m", "mdtrain", "--cmake-dir"], check=True, capture_output=True, text=True, timeout=120
    )
    return out.stdout.strip()


def _installed_cmake_dir():
    """Where the wheel's (or the editable install's) C++ tree really is: next to the _core module.

    scikit-build-core installs _core and the cpp/ tree into the same site-packages/mdtrain folder,
    also for an editable install, whose Python files stay in the source tree.
    """
    return os.path.join(os.path.dirname(mdtrain._core.__file__), "cpp", "lib", "cmake", "mdtrain")


def test_cmake_dir_holds_the_package_config():
    cmake_dir = _cli_cmake_dir()
    assert cmake_dir == mdtrain.cmake_dir()
    assert os.path.isfile(os.path.join(cmake_dir, "mdtrainConfig.cmake")), (
        f"`python -m mdtrain --cmake-dir` printed {cmake_dir!r}, which holds no mdtrainConfig.cmake; "
        f"the installed package config is in {_installed_cmake_dir()!r}"
    )


@pytest.fixture(scope="module")
def train_mlp(tmp_path_factory):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not installed")
    if _compiler() is None:
        pytest.skip("no C++ compiler found (CXX, c++, g++ or clang++)")
    # The example must build from the printed directory; if that is wrong the test above fails
    # and says so, while this one still checks the example against the real install.
    cmake_dir = _cli_cmake_dir()
    if not os.path.isfile(os.path.join(cmake_dir, "mdtrainConfig.cmake")):
        cmake_dir = _installed_cmake_dir()
    assert os.path.isfile(os.path.join(cmake_dir, "mdtrainConfig.cmake")), f"no mdtrainConfig.cmake in {cmake_dir}"

    build = tmp_path_factory.mktemp("example_build")
    env = dict(os.environ)
    # MdtrainBlas.cmake asks the Python on PATH for scipy-openblas32: make it this interpreter.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    configure = [cmake, "-S", EXAMPLE_DIR, "-B", str(build), f"-Dmdtrain_DIR={cmake_dir}",
                 "-DCMAKE_BUILD_TYPE=Release", f"-DPython3_EXECUTABLE={sys.executable}"]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    for cmd in (configure, [cmake, "--build", str(build), "-j2"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
    exe = build / "train_mlp"
    assert exe.is_file()
    return exe


def _run(exe, *args, timeout=300):
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"train_mlp exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _epochs(stdout, expected):
    rows = [(int(e), int(n), float(loss), float(acc)) for e, n, loss, acc in EPOCH_LINE.findall(stdout)]
    assert [r[0] for r in rows] == list(range(1, expected + 1)), stdout
    assert all(r[1] == expected for r in rows), stdout
    return [r[2] for r in rows], [r[3] for r in rows]


def _assert_trained_and_reloaded(stdout, model_path):
    assert "reload check: OK" in stdout, stdout
    assert os.path.isfile(model_path)


def test_example_trains_on_synthetic_data_and_reloads(train_mlp, tmp_path):
    model_path = tmp_path / "mlp.mdt"
    out = _run(train_mlp, "--epochs", 3, "--samples", 1500, "--model", model_path)
    losses, accuracies = _epochs(out, 3)
    assert losses[-1] < losses[0], out
    assert accuracies[-1] > 0.5, out  # ten classes: chance is 0.1
    _assert_trained_and_reloaded(out, model_path)
    assert "data: synthetic" in out


def test_example_under_mirrored_strategy(train_mlp, tmp_path):
    model_path = tmp_path / "mlp2.mdt"
    out = _run(train_mlp, "--epochs", 2, "--samples", 800, "--replicas", 2, "--batch-size", 30, "--model", model_path)
    assert "MirroredStrategy with 2 replica(s)" in out, out
    losses, _ = _epochs(out, 2)
    assert losses[-1] < losses[0], out
    _assert_trained_and_reloaded(out, model_path)


def _idx(array, path):
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    path.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def test_example_trains_on_an_idx_file(train_mlp, tmp_path):
    # A tiny MNIST-shaped set: each class lights up its own band of rows.
    rng = np.random.default_rng(0)
    n = 600
    labels = rng.integers(0, 10, size=n).astype(np.uint8)
    images = rng.integers(0, 60, size=(n, 28, 28)).astype(np.uint8)
    for i, c in enumerate(labels):
        images[i, 2 * c + 4 : 2 * c + 7, :] = 255
    _idx(images, tmp_path / "images-idx3-ubyte")
    _idx(labels, tmp_path / "labels-idx1-ubyte")
    model_path = tmp_path / "idx.mdt"
    out = _run(train_mlp, "--images", tmp_path / "images-idx3-ubyte", "--labels", tmp_path / "labels-idx1-ubyte",
               "--epochs", 4, "--batch-size", 32, "--model", model_path)
    assert "480 train / 120 test samples of shape (28, 28)" in out, out
    losses, accuracies = _epochs(out, 4)
    assert losses[-1] < losses[0], out
    assert accuracies[-1] > 0.9, out
    _assert_trained_and_reloaded(out, model_path)

    # One file format for both APIs: Python loads the C++ model and scores the held-out fifth
    # exactly as the C++ program did.
    test_accuracy = float(re.search(r"^test - loss: [0-9.]+ - accuracy: ([0-9.]+)$", out, re.M).group(1))
    model = mdtrain.keras.models.load_model(model_path)
    assert [type(layer).__name__ for layer in model.layers] == ["Flatten", "Dense", "Dense"]
    x_test = images[480:].astype(np.float32) / np.float32(255)
    predicted = np.argmax(model.predict(x_test, verbose=0), axis=-1)
    assert abs(float(np.mean(predicted == labels[480:])) - test_accuracy) <= 5e-5, out


def test_example_rejects_a_malformed_idx_file(train_mlp, tmp_path):
    (tmp_path / "bad").write_bytes(b"\x00\x00\x08\x03\x00\x00\x00\x02")  # header cut short
    _idx(np.zeros(2, dtype=np.uint8), tmp_path / "labels")
    proc = subprocess.run([str(train_mlp), "--images", str(tmp_path / "bad"), "--labels", str(tmp_path / "labels")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "truncated" in proc.stderr, proc.stderr
