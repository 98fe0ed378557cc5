"""The MPI communicator through the bindings, in two processes started by mpirun: collectives on
NumPy arrays, the world info, a missing rank reported as Python's TimeoutError, and a clean exit
(MPI finalized at exit, also after a failed collective)."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mdtrain
from mdtrain import _core

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(shutil.which("mpirun") is None,
                       reason="mpirun is not installed (Debian: apt-get install openmpi-bin libopenmpi-dev)"),
    pytest.mark.skipif("mpi" not in _core.available_communicators(),
                       reason="mdtrain was built without MPI (install libopenmpi-dev, then rebuild)"),
]

PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(mdtrain.__file__)))


# Each process appends its records to its own file: mpirun may splice lines of several ranks.
PRELUDE = """
import json, os
def emit(rank, **record):
    with open(os.path.join(os.environ["MDTRAIN_TEST_OUT"], "rank%d.jsonl" % rank), "a") as f:
        f.write(json.dumps(dict(rank=rank, **record)) + "\\n")
"""


def mpirun(tmp_path, script, n=2, timeout=120):
    """Runs `script` in n processes; returns (returncode, {rank: [records]}, output)."""
    path = tmp_path / "job.py"
    path.write_text(PRELUDE + textwrap.dedent(script))
    env = dict(os.environ, MDTRAIN_TEST_OUT=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
    # CI containers run as root, which Open MPI refuses unless told twice.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-np", str(n)]
    version = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version:
        cmd.append("--oversubscribe")  # more processes than cores is fine for these tests
    cmd += [sys.executable, str(path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    records = {}
    for r in range(n):
        out = tmp_path / f"rank{r}.jsonl"
        if out.exists():
            records[r] = [json.loads(line) for line in out.read_text().splitlines()]
    return proc.returncode, records, proc.stdout + proc.stderr


def test_collectives_on_numpy_arrays(tmp_path):
    code, records, out = mpirun(tmp_path, """
        import numpy as np
        from mdtrain import _core

        info = _core.mpi_world_info()
        comm, = _core.make_communicators("mpi")
        r = comm.rank

        emit(r, info=info, size=comm.size, backend=comm.backend, timeout=comm.timeout)
        x = np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * r
        same = comm.all_reduce(x) is x
        emit(r, op="sum", value=x.tolist(), dtype=str(x.dtype), same=same)
        y = np.array([1.5, -2.0, r], dtype=np.float64)
        emit(r, op="mean", value=comm.all_reduce(y, op="mean").tolist())
        z = np.array([r, -r], dtype=np.int64)
        emit(r, op="max", value=comm.all_reduce(z, op="max").tolist())
        b = np.full(4, r, dtype=np.int32)
        emit(r, op="broadcast", value=comm.broadcast(b, root=1).tolist())
        g = comm.all_gather(np.array([[r, r + 100]], dtype=np.int32))
        emit(r, op="all_gather", value=g.tolist(), shape=list(g.shape))
        s = comm.reduce_scatter(np.arange(4, dtype=np.float32) * (r + 1))
        emit(r, op="reduce_scatter", value=s.tolist())
        big = np.ones(1 << 20, dtype=np.float32) * (r + 1)  # past the fused size: the pipeline
        emit(r, op="big", value=float(comm.all_reduce(big).sum()))
        try:
            comm.all_reduce(x, op="median")
        except ValueError as e:
            emit(r, op="bad_op", error=str(e))
        ro = np.zeros(3, dtype=np.float32)
        ro.flags.writeable = False
        try:
            comm.all_reduce(ro)
        except ValueError as e:
            emit(r, op="read_only", error=str(e))
        comm.barrier()
    """)
    assert code == 0, out
    assert sorted(records) == [0, 1], out
    for r in (0, 1):
        got = {rec.get("op", "info"): rec for rec in records[r]}
        assert got["info"]["info"] == {"rank": r, "size": 2, "local_rank": r, "local_size": 2}
        assert (got["info"]["size"], got["info"]["backend"], got["info"]["timeout"]) == (2, "mpi", 300.0)
        sum_want = (2 * np.arange(6, dtype=np.float32).reshape(2, 3) + 10).tolist()
        assert got["sum"]["value"] == sum_want and got["sum"]["dtype"] == "float32" and got["sum"]["same"]
        assert got["mean"]["value"] == [1.5, -2.0, 0.5]
        assert got["max"]["value"] == [1, 0]
        assert got["broadcast"]["value"] == [1, 1, 1, 1]
        assert got["all_gather"]["value"] == [[0, 100], [1, 101]] and got["all_gather"]["shape"] == [2, 2]
        # rank r gets block r of arange(4) * 1 + arange(4) * 2
        assert got["reduce_scatter"]["value"] == [3.0 * (2 * r), 3.0 * (2 * r + 1)]
        assert got["big"]["value"] == 3.0 * (1 << 20)
        assert "op must be 'sum', 'mean', 'max' or 'min' (got 'median')" in got["bad_op"]["error"]
        assert "[distribute] all_reduce: the array is read-only" in got["read_only"]["error"]
    assert "exited without calling finalize" not in out


def test_a_missing_rank_is_a_timeout_error_naming_it(tmp_path):
    code, records, out = mpirun(tmp_path, """
        import time
        import numpy as np
        from mdtrain import _core

        comm, = _core.make_communicators("mpi")
        comm.set_timeout(0.5)
        comm.barrier()
        try:
            if comm.rank == 1:
                time.sleep(3)  # misses the all_reduce below, then joins too late
                comm.barrier()
            else:
                comm.all_reduce(np.ones(3, dtype=np.float32))
            emit(comm.rank, error="none")
        except TimeoutError as e:
            emit(comm.rank, error=type(e).__name__, message=str(e))
    """)
    assert code == 0, out  # both processes exit normally: nothing called MPI_Abort
    assert records[0][0]["error"] == "TimeoutError", out
    msg = records[0][0]["message"]
    assert msg.startswith("[mpi] all_reduce #2 on rank 0 timed out after 0.5 s: rank 1 did not arrive"), msg
    assert "rank 1 last entered barrier #1 and did not answer" in msg, msg
    late = records[1][0]
    assert late["error"] == "TimeoutError", out
    assert "barrier #2 on rank 1 cannot run, the group failed earlier" in late["message"], late
    assert "rank 1 did not arrive" in late["message"], late


def test_world_info_without_mpirun_is_a_job_of_one(tmp_path):
    script = tmp_path / "single.py"
    script.write_text(textwrap.dedent("""
        import json
        import numpy as np
        from mdtrain import _core
        comm, = _core.make_communicators("mpi")
        x = np.arange(3, dtype=np.float64)
        comm.all_reduce(x, op="mean")
        print(json.dumps({"info": _core.mpi_world_info(), "x": x.tolist(), "size": comm.size}))
    """))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rec == {"info": {"rank": 0, "size": 1, "local_rank": 0, "local_size": 1}, "x": [0.0, 1.0, 2.0], "size": 1}
