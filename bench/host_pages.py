"""Huge pages for large host tensors (cpp/mdtrain/core/host_blocks.h), on and off: step time of the
heavy MLP (784-2048-2048-10, Adam, batch 64: 23 MB of weights, as many of gradients and twice that
of Adam's slots) on one device, MirroredStrategy x2 (one process, ZeRO-1 over the threads
communicator) and MultiWorkerMirroredStrategy with 2 MPI processes, each with MDTRAIN_HUGE_PAGES=0
(4 KB pages) and with the default (huge pages from 4 MB), the two settings interleaved round by
round so a drift of the machine meets both. A step's figure is bench/plan_accuracy.py's: the best of
3 fits' wall time per step after an untimed fit.

    python bench/host_pages.py [--rounds 3]
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _common  # noqa: E402

JOB = r"""
import json, sys
sys.path.insert(0, sys.argv[2])
import mdtrain as tf
from plan_accuracy import build, data, measured_step, workers_agree
case = sys.argv[1]
strategy = {"multi_worker": tf.distribute.MultiWorkerMirroredStrategy,
            "mirrored": lambda: tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]),
            "one_device": lambda: None}[case]()
model = build(tf, "heavy", strategy.scope() if strategy else None)
x, y = data("heavy", 64, 30)
agree = None
if case == "multi_worker":
    from mdtrain import _core
    agree = workers_agree(_core.make_communicators("mpi")[0])
best = measured_step(model, x, y, 64, 3, agree)
if case != "multi_worker" or strategy.should_checkpoint:  # worker 0 reports
    print("PROBE " + json.dumps(best), flush=True)
"""

CASES = {"one_device": "OneDeviceStrategy", "mirrored": "MirroredStrategy x2",
         "multi_worker": "MultiWorkerMirrored 2 processes"}


def run(case, huge):
    from mdtrain.plan.probes import probe_env, run_probe
    env = probe_env(MDTRAIN_HUGE_PAGES="1" if huge else "0", MDTRAIN_NUM_CPU_DEVICES="2",
                    OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if case == "multi_worker":
        script = os.path.join(_common.RESULTS, "_host_pages_job.py")
        os.makedirs(_common.RESULTS, exist_ok=True)
        with open(script, "w") as f:
            f.write(JOB)
        cmd = [sys.executable, "-m", "mdtrain.launch", "-n", "2", "--devices-per-worker", "1", script, case, HERE]
    else:
        cmd = [sys.executable, "-c", JOB, case, HERE]
    text, failure = run_probe(cmd, env, timeout=1800)
    if text is None:
        raise SystemExit(f"{case} (huge pages {huge}) {failure}")
    return json.loads(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every case, both settings")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    steps = {(case, huge): [] for case in CASES for huge in (False, True)}
    comm = {(case, huge): [] for case in CASES for huge in (False, True)}
    for _ in range(args.rounds):
        for case in CASES:
            for huge in (False, True):
                r = run(case, huge)
                steps[case, huge].append(r["step"])
                comm[case, huge].append(r["communication"])
    rows = []
    for case, label in CASES.items():
        small, big = np.median(steps[case, False]), np.median(steps[case, True])
        rows.append({"case": label, "4KB_pages_ms": round(small * 1e3, 2), "huge_pages_ms": round(big * 1e3, 2),
                     "speedup": round(small / big, 2),
                     "comm_4KB_ms": round(float(np.median(comm[case, False])) * 1e3, 2),
                     "comm_huge_ms": round(float(np.median(comm[case, True])) * 1e3, 2),
                     "rounds_faster": sum(b < s for s, b in zip(steps[case, False], steps[case, True]))})
    print("load average before / after:", round(load_before, 2), round(os.getloadavg()[0], 2))
    _common.print_table(rows, ["case", "4KB_pages_ms", "huge_pages_ms", "speedup", "comm_4KB_ms", "comm_huge_ms",
                               "rounds_faster"])
    print(f"(median over {args.rounds} rounds of each setting's step, the best of 3 fits each; rounds_faster: "
          f"rounds in which huge pages gave the shorter step)")
    path = _common.write_json("host_pages.json", {"machine": _common.machine(), "rounds": args.rounds,
                                                  "load_average_before": load_before, "rows": rows})
    print("wrote", path)


if __name__ == "__main__":
    main()
