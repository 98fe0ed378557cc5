"""The planner prices ModelParallel from the core's StepPlan (price_tensor_parallel.py) and parameter
servers from the worker's (price_parameter_servers.py) to the predictions of the descriptions it held
before (recorded in data/plan_pricing_reference.json before they were replaced: rel 1e-9), where the
two describe the same step: a tensor-parallel batch axis of one, or one that all-reduces (GPUs); on
CPU devices of one process the plan's batch axis is ZeRO-1, as the executor runs it, where the old
description all-reduced."""
import dataclasses
import json
import pathlib

import pytest

from mdtrain.plan import AlphaBeta, Cluster, ModelProfile, price_parameter_servers, price_tensor_parallel
from mdtrain.plan.profile import LayerCost

REFERENCE = json.loads((pathlib.Path(__file__).parent / "data" / "plan_pricing_reference.json").read_text())


def synthetic_profile(layers=4, units=256, per_row=1e-6, fixed=1e-5, kinds=None):
    kinds = kinds or ["Dense"] * layers
    costs = tuple(LayerCost(name=f"layer_{i}", kind=kind, params=units * units + units if kind == "Dense" else 0,
                            activation_values=units, forward_flops=2.0 * units * units,
                            backward_flops=4.0 * units * units, fixed_s=fixed, per_row_s=per_row * (1 + i),
                            backward_share=2 / 3) for i, kind in enumerate(kinds))
    return ModelProfile(name="synthetic", layers=costs, input_values=units, optimizer="adam", optimizer_slots=2,
                        rows_measured=(16, 128), threads=1)


def heavy_like_profile():
    """Wide Dense layers with weightless layers between (a pair through Dropout/Activation), an
    unpaired one and an output layer."""
    return synthetic_profile(layers=6, units=1024, per_row=4e-6,
                             kinds=["Dense", "Dropout", "Dense", "Dense", "Activation", "Dense"])


def _measured_like(prof, rows=(1, 2, 4, 8, 16, 32, 64, 128)):
    return dataclasses.replace(prof, layers=tuple(dataclasses.replace(x, points=tuple((r, x.time(r)) for r in rows),
                                                                      shared_points=tuple((r, 1.3 * x.time(r))
                                                                                          for r in rows))
                                                  for x in prof.layers), shared_by=2)


def gpu_cluster(hosts=1, bandwidth=50e9, overlaps=True):
    return Cluster(name="test", hosts=hosts, devices_per_host=8, peak_flops=1e14, memory_bytes=80e9,
                   memory_bandwidth=2e12, intra_host=AlphaBeta(3e-6, 1 / (8 * bandwidth)),
                   inter_host=AlphaBeta(5e-6, 1 / bandwidth), overlaps_communication=overlaps, source="test figures")


def cpu_cluster(devices=4, cores=None):
    return dataclasses.replace(gpu_cluster(overlaps=False), devices_per_host=devices, cores=cores)


def _same(new, recorded):
    step, memory, breakdown = recorded[:3]
    assert new.step_time_s == pytest.approx(step, rel=1e-9)
    assert new.memory_per_device_bytes == pytest.approx(memory, rel=1e-9)
    assert set(new.breakdown) == set(breakdown)
    for key, value in breakdown.items():
        assert new.breakdown[key] == pytest.approx(value, rel=1e-9, abs=1e-15), key


TP_CASES = [(prof, cluster, t, dp, scale)
            for prof in ("synthetic", "heavy", "measured")
            for cluster in ("gpu", "cpu", "cpu_shared")
            for t, dp in ((2, 1), (4, 1), (2, 2), (4, 2))
            if dp == 1 or cluster == "gpu"
            for scale in (1.0, 0.5)]


def _profile(name):
    return {"synthetic": synthetic_profile, "heavy": heavy_like_profile,
            "measured": lambda: _measured_like(synthetic_profile())}[name]()


def _cluster(name):
    return {"gpu": gpu_cluster, "cpu": cpu_cluster, "cpu_shared": lambda: cpu_cluster(4, cores=2)}[name]()


@pytest.mark.parametrize("prof,cluster,t,dp,scale", TP_CASES)
def test_tensor_parallel_priced_from_the_plan_as_before(prof, cluster, t, dp, scale):
    profile, c = _profile(prof), _cluster(cluster)
    new, forms = price_tensor_parallel.tensor_parallel(profile, c, t, dp, 256, scale=scale)
    recorded = REFERENCE["tensor_parallel"][f"{prof}-{cluster}-{t}-{dp}-{scale}"]
    assert forms == recorded[3]
    _same(new, recorded)


def test_tensor_parallel_on_cpu_devices_prices_the_executors_zero1():
    """Two batch groups of CPU devices: the plan reduce-scatters, updates half, all-gathers (the
    executor's ZeRO-1), not one all-reduce and the whole update."""
    profile, c = synthetic_profile(), cpu_cluster(4)
    plan = price_tensor_parallel.tensor_parallel_plan(profile, price_tensor_parallel.forms(profile, 2), 2, 2, 256)
    batch = [op["collective"] for op in plan.ops(0) if op["kind"] == "collective" and op["axis"] == "batch"]
    assert batch == ["reduce_scatter", "all_gather"]
    new, _ = price_tensor_parallel.tensor_parallel(profile, c, 2, 2, 256)
    assert new.breakdown["update"] < REFERENCE["tensor_parallel_zero1_case_update_s_all_reduce_description"]


PS_CASES = [(prof, cluster, workers, k) for prof in ("synthetic", "heavy", "measured") for cluster in ("gpu", "cpu")
            for workers in (1, 2, 8) for k in (1, 2, 4)]


@pytest.mark.parametrize("prof,cluster,workers,k", PS_CASES)
def test_parameter_servers_priced_from_the_plan_as_before(prof, cluster, workers, k):
    profile, c = _profile(prof), _cluster(cluster)
    if cluster == "gpu":
        c = dataclasses.replace(c, hosts=2)
    _same(price_parameter_servers.parameter_servers(profile, c, workers, k, 256),
          REFERENCE["parameter_servers"][f"{prof}-{cluster}-{workers}-{k}"])


ASYNC_CASES = [(prof, workers, k, threads, push) for prof in ("synthetic", "measured") for workers in (1, 2, 3)
               for k in (1, 2, 4) for threads in (None, 1) for push in (False, True)]


@pytest.mark.parametrize("prof,workers,k,threads,push", ASYNC_CASES)
def test_asynchronous_parameter_servers_priced_from_the_plan_as_before(prof, workers, k, threads, push):
    profile = _profile(prof)
    c = dataclasses.replace(cpu_cluster(workers + k, cores=2), name="this-machine")
    transport, push_transport = AlphaBeta(2e-4, 1e-9), (AlphaBeta(3e-4, 2e-9) if push else None)
    kwargs = dict(process_threads=threads, push_transport=push_transport, step_overhead_s=1e-4)
    _same(price_parameter_servers.parameter_servers_async(profile, c, workers, k, 64, transport, **kwargs),
          REFERENCE["parameter_servers_async"][f"{prof}-{workers}-{k}-{threads}-{push}"])


def test_each_server_is_priced_for_the_rows_the_partitioner_gives_it():
    """Layers of 5 values on 2 servers: shards of 3 and 2 values, placed round-robin from where the
    previous layer stopped, so the servers' bytes are the real partitioning's, not halves."""
    profile = dataclasses.replace(synthetic_profile(layers=2), layers=tuple(
        dataclasses.replace(x, params=5) for x in synthetic_profile(layers=2).layers))
    plan = price_parameter_servers.ps_plan(profile, 2)
    assert price_parameter_servers.server_bytes(plan) == ([(3 + 3) * 4, (2 + 2) * 4], [(3 + 3) * 4, (2 + 2) * 4])
    one = price_parameter_servers.ps_plan(dataclasses.replace(profile, layers=profile.layers[:1]), 3)
    assert price_parameter_servers.server_bytes(one)[0] == [2 * 4, 2 * 4, 1 * 4]
