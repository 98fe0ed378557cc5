"""Shared helpers for the benchmarks: data, the BLAS peak, result files, tables."""
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def fashion_mnist_flat():
    """Fashion-MNIST as (x_train float32 (60000, 784) in [0,1], y_train, x_test, y_test)."""
    import mdtrain as tf

    (x, y), (xt, yt) = tf.keras.datasets.fashion_mnist.load_data()
    return (x.reshape(-1, 784).astype(np.float32) / 255, y, xt.reshape(-1, 784).astype(np.float32) / 255, yt)


def blas_peak_gflops(threads):
    """Best float32 GEMM rate of mdtrain's GEMM at `threads` threads (2048^3, best of 5): blocks of
    C on mdtrain's threads, each a single-threaded OpenBLAS call."""
    from mdtrain import _core

    before = _core.cpu_thread_count()
    _core.set_cpu_threads(threads)
    try:
        _core.time_gemm(512, 512, 512, 2)  # warm up the thread pool and caches
        seconds = _core.time_gemm(2048, 2048, 2048, 5)
    finally:
        _core.set_cpu_threads(before)
    return 2 * 2048**3 / seconds / 1e9


def concurrent_gemm_gflops(workers, m=256, n=2048, k=2048):
    """Total sgemm rate of `workers` threads each running single-threaded GEMMs at once: how much
    compute the machine really has in parallel (2 vCPUs may share one core's FP units)."""
    import threading

    from mdtrain import _core

    before = _core.cpu_thread_count()
    _core.set_cpu_threads(1)
    rates = [0.0] * workers

    def work(i):
        rates[i] = 2 * m * n * k / _core.time_gemm(m, n, k, 5) / 1e9

    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        _core.set_cpu_threads(before)
    return sum(rates)


def cpu_ticks():
    """This machine's CPU time so far in clock ticks, summed over its CPUs: (stolen, all). Stolen
    time is what the hypervisor gave another guest while this one had work for that CPU; a guest
    cannot see it otherwise (its own clocks, faults and context switches do not show it)."""
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in f.readline().split()[1:9])
    return steal, user + nice + system + idle + iowait + irq + softirq + steal


def steal_share(before, after):
    """The share of the CPU time between two cpu_ticks() readings that the hypervisor stole (0 when
    no tick passed: the counters move in 10 ms ticks per CPU)."""
    stolen, total = after[0] - before[0], after[1] - before[1]
    return stolen / total if total > 0 else 0.0


def machine():
    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
            "load_average": os.getloadavg(), "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def write_json(name, payload):
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, name)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2)
    os.replace(tmp, path)
    return path


def machine_name():
    """The CPU model and core count, as bench/RESULTS.md names a machine."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    return f"{os.cpu_count()}-core {model}"


def append_run(path, bench, command, what, run, keep=4):
    """Adds `run` ({"conditions", "figures", "tables", ...}; the machine and date are filled in) to
    the record at `path` (a name: bench/results/<name>) in bench/results_md.py's format, keeping
    the last `keep` runs; returns the path."""
    path = path if os.path.dirname(path) else os.path.join(RESULTS, path)
    record = {}
    if os.path.exists(path):
        with open(path) as f:
            record = json.load(f)
    runs = record.get("runs", []) if isinstance(record, dict) else []
    run = dict({"machine": machine_name(), "date": time.strftime("%Y-%m-%d")}, **run)
    record = {"bench": bench, "command": command, "what": what, "runs": (runs + [run])[-keep:]}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, path)
    return path


def print_table(rows, columns):
    widths = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(w) for c, w in zip(columns, widths)))


def find_python_with(module):
    """An interpreter that can import `module` (this one, $MDTRAIN_BENCH_PYTHON, /opt/tfenv, or the
    venv the test command makes in ~/.cache/mdtrain/tfenv), or None."""
    candidates = [os.environ.get("MDTRAIN_BENCH_PYTHON"), sys.executable, "/opt/tfenv/bin/python",
                  os.path.expanduser("~/.cache/mdtrain/tfenv/bin/python")]
    for py in candidates:
        if py and os.path.exists(py):
            ok = subprocess.run([py, "-c", f"import {module}"], capture_output=True).returncode == 0
            if ok:
                return py
    return None
