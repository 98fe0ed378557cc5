"""The planner's ParameterServerStrategy rows on this machine against a measured run: the seed MLP
(784-128-10, Adam, batch 64 per step), n workers and k servers as processes on loopback
(LocalCluster, bench/parameter_server.py's run_ps: asynchronous, steps_per_execution=10).

Predicted: plan(model, 64, Cluster.measure(devices=n, mpi=False, pipeline=False)), the row with
num_ps=k: seconds per update. Measured: the timed fit's wall time over its steps (every step is one
update of 64 rows), and the workers' mean pull / push / compute per step (their own counters).

    flock /work/bench.lock python bench/plan_ps.py [--workers 1 2] [--servers 1 2] [--steps 600]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import parameter_server as ps_bench  # noqa: E402

BATCH = 64


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    import mdtrain as tf
    from mdtrain.plan import Cluster, plan

    build = ps_bench.MODELS["seed MLP"][0]
    rows = []
    load_before = os.getloadavg()
    for workers in args.workers:
        cluster = Cluster.measure(devices=workers, mpi=False, pipeline=False)
        print(cluster, flush=True)
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential(eval(build))  # noqa: S307 - the bench's own table
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        plans = plan(model, BATCH, cluster)
        for servers in args.servers:
            p = next(p for p in plans if p.strategy_name == "ParameterServerStrategy" and
                     p.settings["num_ps"] == servers)
            if not p.applicable:
                print(f"{workers} workers, {servers} servers: skipped: {p.skipped}")
                continue
            m = ps_bench.run_ps(tf, "seed MLP", servers, workers, batch=BATCH, steps=args.steps)
            measured_ms = 1e3 / m["steps_per_s"]
            row = {"workers": workers, "servers": servers, "predicted_ms": round(p.step_time_s * 1e3, 3),
                   "measured_ms": round(measured_ms, 3),
                   "error": f"{p.step_time_s * 1e3 / measured_ms - 1:+.0%}",
                   "predicted": {k: round(v * 1e3, 3) for k, v in p.breakdown.items()},
                   "measured_pull_ms": round(m["pull_ms"], 3), "measured_push_ms": round(m["push_ms"], 3),
                   "measured_compute_ms": round(m["compute_ms"], 3), "load": os.getloadavg()[0]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("load average before", load_before, "after", os.getloadavg())
    _common.print_table(rows, ["workers", "servers", "predicted_ms", "measured_ms", "error", "measured_pull_ms",
                               "measured_push_ms", "measured_compute_ms", "load"])
    path = _common.write_json("plan_ps.json", {"machine": _common.machine(), "command": " ".join(sys.argv),
                                               "load_before": load_before, "load_after": os.getloadavg(),
                                               "rows": rows})
    print("wrote", path)


if __name__ == "__main__":
    main()
