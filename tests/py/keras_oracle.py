"""Finding a Python with Keras 3 (the oracle the Keras interop tests compare against) and
running Keras code in it (Keras and mdtrain never share a process).

Importing TensorFlow takes seconds and the interop tests run Keras code a hundred times, so one
server process per test session imports it once and forks a child for each snippet: each snippet
still runs in a fresh process state (its own cwd, seeds, Keras globals), at a fork's cost.

Looked for, in order: $MDTRAIN_KERAS_PYTHON, the venv scripts/test.sh makes
(~/.cache/mdtrain/tfenv), /opt/tfenv. The tests skip, saying why, when none has Keras 3.
"""
import atexit
import functools
import json
import os
import subprocess
import textwrap
import threading

import pytest

_CANDIDATES = [os.environ.get("MDTRAIN_KERAS_PYTHON"),
               os.path.expanduser("~/.cache/mdtrain/tfenv/bin/python"), "/opt/tfenv/bin/python"]


@functools.lru_cache(maxsize=None)
def keras_python():
    """(path, None) of a Python with Keras 3 and h5py, or (None, why not)."""
    tried = []
    for candidate in _CANDIDATES:
        if not candidate:
            continue
        if not os.path.exists(candidate):
            tried.append(f"{candidate}: missing")
            continue
        probe = subprocess.run([candidate, "-c", "import keras, h5py; print(keras.__version__)"],
                               capture_output=True, text=True, timeout=300, env=_env())
        version = probe.stdout.strip().splitlines()[-1] if probe.returncode == 0 and probe.stdout.strip() else ""
        if version.startswith("3."):
            return candidate, None
        tried.append(f"{candidate}: no Keras 3 ({probe.stderr.strip().splitlines()[-1:] or version})")
    return None, ("no Python with Keras 3 found (set MDTRAIN_KERAS_PYTHON, or run scripts/test.sh where PyPI is "
                  "reachable to make ~/.cache/mdtrain/tfenv); tried: " + "; ".join(tried))


def _env():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    return env


def require_keras():
    path, why = keras_python()
    if path is None:
        pytest.skip(why)
    return path


# The server: one JSON request per line on stdin ({"code", "cwd", "timeout"}), one JSON reply per
# line on stdout ({"rc", "stdout", "stderr"}). The parent only imports (it never runs a TF op, so no
# runtime threads exist to be lost by fork); each child runs one snippet and exits.
_SERVER = r"""
import contextlib, io, json, os, select, signal, sys, time, traceback
import numpy, h5py, keras, tensorflow
reply_channel = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    request = json.loads(line)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        out, err, rc = io.StringIO(), io.StringIO(), 0
        try:
            os.chdir(request["cwd"])
            sys.argv = ["-c"]
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                exec(compile(request["code"], "<keras side>", "exec"), {"__name__": "__main__"})
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            err.write(traceback.format_exc())
            rc = 1
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(json.dumps({"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}).encode())
        os._exit(0)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + request["timeout"]
    while True:
        ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            chunks = [json.dumps({"rc": -9, "stdout": "", "stderr": "timed out"}).encode()]
            break
        chunk = os.read(read_end, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    reply = b"".join(chunks) or json.dumps({"rc": -1, "stdout": "",
                                             "stderr": f"the child died (wait status {status})"}).encode()
    reply_channel.write(reply.decode() + "\n")
    reply_channel.flush()
"""

_server = None
_server_lock = threading.Lock()


def _keras_server():
    global _server
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen([require_keras(), "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True, env=_env())
        atexit.register(_server.stdin.close)
    return _server


def run_keras(code, cwd, timeout=600):
    """Runs code (a Python snippet importing keras) in the Keras interpreter, in a fresh process
    with cwd as its working directory; returns what it printed, fails with its output."""
    with _server_lock:
        server = _keras_server()
        server.stdin.write(json.dumps({"code": textwrap.dedent(code), "cwd": os.fspath(cwd), "timeout": timeout}) +
                           "\n")
        server.stdin.flush()
        line = server.stdout.readline()
    assert line, "the Keras server stopped"
    result = json.loads(line)
    assert result["rc"] == 0, f"Keras side failed:\n{result['stdout']}\n{result['stderr']}"
    return result["stdout"]
