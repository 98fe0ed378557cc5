"""The scaling planner (mdtrain.plan, tf.distribute.experimental.plan): its API, its bad inputs,
the event simulator's properties, the α–β fit, and one check against measurement."""
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import mdtrain as tf
from mdtrain import _core
from mdtrain.plan import AlphaBeta, Cluster, ModelProfile, fit_alpha_beta, fit_benchmark_json, plan
from mdtrain.plan import (price_parameter_servers, price_pipeline, price_plan, price_tensor_parallel, probes,
                          ps_probe, stage_profile, step_costs)
from mdtrain.plan.core_threads import core_threads
from mdtrain.plan.profile import LayerCost, profile_model, profile_rows
from mdtrain.plan.simulate import Simulator

STRATEGY_NAMES = {"OneDeviceStrategy", "MirroredStrategy", "MultiWorkerMirroredStrategy", "CentralStorageStrategy",
                  "ParameterServerStrategy", "ModelParallel", "PipelineParallel"}


def seed_mlp():
    tf.keras.utils.set_random_seed(0)
    m = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu", input_shape=(784,)),
                             tf.keras.layers.Dense(10)])
    m.compile(optimizer=tf.keras.optimizers.Adam(),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def synthetic_profile(layers=4, units=256, per_row=1e-6, fixed=1e-5):
    """A profile with known costs (no timing): `layers` Dense layers of `units` units."""
    costs = tuple(LayerCost(name=f"dense_{i}", kind="Dense", params=units * units + units, activation_values=units,
                            forward_flops=2.0 * units * units, backward_flops=4.0 * units * units, fixed_s=fixed,
                            per_row_s=per_row, backward_share=2 / 3) for i in range(layers))
    return ModelProfile(name="synthetic", layers=costs, input_values=units, optimizer="adam", optimizer_slots=2,
                        rows_measured=(16, 128), threads=1)


def _measured_like(prof, rows=(1, 2, 4, 8, 16, 32, 64)):
    """`prof` with measured-looking points (as profile_model gives on this machine)."""
    return dataclasses.replace(prof, layers=tuple(dataclasses.replace(x, points=tuple((r, x.time(r)) for r in rows))
                                                  for x in prof.layers))


def gpu_cluster(hosts=2, bandwidth=50e9, overlaps=True):
    return Cluster(name="test", hosts=hosts, devices_per_host=8, peak_flops=1e14, memory_bytes=80e9,
                   memory_bandwidth=2e12, intra_host=AlphaBeta(3e-6, 1 / (8 * bandwidth)),
                   inter_host=AlphaBeta(5e-6, 1 / bandwidth), overlaps_communication=overlaps, source="test figures")


# ---- API ----------------------------------------------------------------------------------------

def test_plan_is_exposed_under_tf_distribute_experimental():
    assert tf.distribute.experimental.plan is plan
    assert tf.distribute.experimental.Cluster is Cluster


def test_plans_on_a_preset_are_sorted_and_complete():
    model = seed_mlp()
    plans = tf.distribute.experimental.plan(model, 256, "dgx-h100")
    ok = [p for p in plans if p.applicable]
    assert ok and plans.best is ok[0]
    assert [p.step_time_s for p in ok] == sorted(p.step_time_s for p in ok)
    for p in plans:
        assert p.strategy_name in STRATEGY_NAMES
        assert isinstance(p.settings, dict) and p.num_devices >= 1
    for p in ok:
        assert p.step_time_s > 0 and p.memory_per_device_bytes > 0 and p.why
        assert set(p.breakdown) == {"compute", "communication", "update", "bubble"}
        assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=1e-6)
    names = {p.strategy_name for p in ok}
    assert {"OneDeviceStrategy", "MirroredStrategy", "CentralStorageStrategy", "ParameterServerStrategy",
            "ModelParallel", "PipelineParallel"} <= names
    # A 2-layer model cannot make 4 stages: listed as skipped, with the reason.
    skipped = [p for p in plans if p.strategy_name == "PipelineParallel" and not p.applicable]
    assert any("4 stages > 2 layers" in p.skipped for p in skipped)
    table = str(plans)
    assert "step ms" in table and "dgx-h100" in table and "skipped: 4 stages > 2 layers" in table


def test_batch_not_divisible_is_a_skipped_plan_with_its_reason():
    plans = plan(seed_mlp(), 63, "dgx-h100")
    reasons = [p.skipped for p in plans if not p.applicable]
    assert any("not divisible" in r for r in reasons)


def test_multi_host_preset_lists_multi_worker_mirrored():
    plans = plan(seed_mlp(), 1024, Cluster.preset("dgx-h100", hosts=4))
    mw = [p for p in plans if p.strategy_name == "MultiWorkerMirroredStrategy" and p.applicable]
    assert mw and all(p.num_devices == 32 for p in mw)


def test_cli_prints_the_table(tmp_path):
    path = tmp_path / "seed.keras"
    seed_mlp().save(str(path))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-m", "mdtrain.plan", str(path), "--batch", "64", "--cluster",
                          "dgx-a100"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "MirroredStrategy" in out.stdout and "NVIDIA datasheet" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "mdtrain.plan", str(path), "--batch", "64", "--cluster", "tpu-pod"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and "unknown cluster preset 'tpu-pod'" in bad.stderr


# ---- bad input ----------------------------------------------------------------------------------

def test_unbuilt_model_is_a_value_error():
    model = tf.keras.Sequential([tf.keras.layers.Dense(4)])
    with pytest.raises(ValueError, match="not built"):
        plan(model, 32, "dgx-h100")


@pytest.mark.parametrize("batch", [0, -4, 2.5])
def test_bad_batch_is_a_value_error(batch):
    with pytest.raises(ValueError, match="global_batch_size"):
        plan(seed_mlp(), batch, "dgx-h100")


def test_unknown_preset_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="unknown cluster preset 'dgx-z9'"):
        Cluster.preset("dgx-z9")
    with pytest.raises(ValueError, match="unknown cluster preset"):
        plan(seed_mlp(), 32, "dgx-z9")


@pytest.mark.parametrize("field", ["hosts", "devices_per_host"])
def test_zero_devices_is_a_value_error_naming_the_field(field):
    with pytest.raises(ValueError, match=f"{field} must be an integer >= 1"):
        Cluster.preset("dgx-h100").with_devices(**{field: 0})


def test_presets_name_their_source():
    for name in Cluster.preset_names():
        c = Cluster.preset(name)
        assert "datasheet" in c.source and c.num_devices == 8


# ---- the simulator ------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(2, 2), (2, 8), (4, 4), (4, 16), (8, 8)])
def test_simulated_bubble_of_equal_stages_is_the_formula(schedule, p, m):
    prof = synthetic_profile()
    result, bubble, span = price_pipeline.pipeline(prof, gpu_cluster(), p, m, schedule, 1, 64 * m,
                                              stage_costs=[(1.0, 2.0)] * p)
    assert span == pytest.approx((m + p - 1) * 3.0)
    assert bubble / span == pytest.approx((p - 1) / (m + p - 1))
    # ... and what the core's own schedule simulator says
    assert bubble / span == pytest.approx(_core.pipeline_bubble_fraction(schedule, p, m, 1.0, 2.0))


def test_pipeline_ops_are_the_executors():
    ops = _core.pipeline_schedule_ops("1f1b", 2, 4)
    assert ops[0][0] == ("forward", 0) and ("backward", 3) in ops[1]
    with pytest.raises(ValueError):
        _core.pipeline_schedule_ops("1f1b", 4, 2)  # fewer micro-batches than stages


def test_pipeline_plans_cost_the_cut_the_executor_makes():
    # Layer times at the executor's timing rows of 1, 8, 1, 1 ms: of 2 stages, [0 1 | 2 3] has the
    # least costly slowest stage (9 ms, either other cut 10 ms), the core's cut; plans say it.
    def layer(i, ms):
        return dataclasses.replace(synthetic_profile().layers[0], name=f"dense_{i}", fixed_s=ms * 1e-3, per_row_s=0.0)
    prof = dataclasses.replace(synthetic_profile(), layers=tuple(layer(i, t) for i, t in enumerate((1, 8, 1, 1))))
    assert price_pipeline.balance_time_starts(prof, 2) == list(_core.balance_stages([1, 8, 1, 1], 2)) == [2]
    assert price_pipeline.balance_time_starts(prof, 4) == [1, 2, 3]
    plans = plan(seed_mlp(), 64, gpu_cluster(hosts=1), profile=prof)
    piped = [p for p in plans if p.strategy_name == "PipelineParallel" and p.applicable]
    assert piped and all(p.settings["stage_starts"] == price_pipeline.balance_time_starts(prof, p.settings["stages"])
                         for p in piped)


@pytest.mark.parametrize("bucket", [1 << 20, 64 << 10, 25 << 20])
def test_overlap_never_makes_a_step_slower_than_its_compute(bucket):
    prof = synthetic_profile()
    for n in (2, 8, 16):
        over = data_parallel(prof, gpu_cluster(overlaps=True), n, 256, bucket_bytes=bucket)
        blocking = data_parallel(prof, gpu_cluster(overlaps=False), n, 256, bucket_bytes=bucket)
        alone = over.breakdown["compute"] + over.breakdown["update"]
        assert over.step_time_s >= alone - 1e-12
        assert over.step_time_s <= blocking.step_time_s + 1e-12


def test_overlap_hides_bucket_all_reduces_behind_backward():
    # Small buckets, slow enough links: the overlapped step exposes less communication.
    prof = synthetic_profile(layers=8, per_row=1e-5)
    over = data_parallel(prof, gpu_cluster(bandwidth=5e9), 16, 256, bucket_bytes=64 << 10)
    blocking = data_parallel(prof, gpu_cluster(bandwidth=5e9, overlaps=False), 16, 256,
                                   bucket_bytes=64 << 10)
    assert over.breakdown["communication"] < blocking.breakdown["communication"]


def test_more_bandwidth_is_never_slower():
    prof = synthetic_profile()
    for bw in (1e9, 1e10, 1e11):
        slow, fast = gpu_cluster(bandwidth=bw), gpu_cluster(bandwidth=bw * 4)
        pairs = [
            (data_parallel(prof, slow, 16, 256), data_parallel(prof, fast, 16, 256)),
            (data_parallel(prof, slow, 8, 256, sync="zero1"),
             data_parallel(prof, fast, 8, 256, sync="zero1")),
            (data_parallel(prof, slow, 8, 256, sync="parameter_device"),
             data_parallel(prof, fast, 8, 256, sync="parameter_device")),
            (price_tensor_parallel.tensor_parallel(prof, slow, 4, 4, 256)[0], price_tensor_parallel.tensor_parallel(prof, fast, 4, 4, 256)[0]),
            (price_pipeline.pipeline(prof, slow, 4, 8, "1f1b", 4, 256)[0], price_pipeline.pipeline(prof, fast, 4, 8, "1f1b", 4, 256)[0]),
            (price_parameter_servers.parameter_servers(prof, slow, 8, 2, 256), price_parameter_servers.parameter_servers(prof, fast, 8, 2, 256)),
        ]
        for a, b in pairs:
            assert b.step_time_s <= a.step_time_s + 1e-12


def test_buckets_start_last_first_at_the_layer_that_finalizes_them():
    prof = synthetic_profile(layers=4, units=256)  # 65,792 values per layer
    owner = price_plan._finalizing_layer(prof)

    def buckets(bucket_bytes):
        step = price_plan.replicated_plan(prof, "MirroredStrategy", 2, host_replicas=False, bucket_bytes=bucket_bytes)
        return [(op["bucket"], owner(op["first_value"])) for op in step.ops(0)
                if op["kind"] == "collective" and op["during_backward"]]
    assert buckets(4 * 65_792) == [(3, 3), (2, 2), (1, 1), (0, 0)]  # one bucket per layer, the last first
    assert buckets(25 << 20) == [(0, 0)]


def data_parallel(prof, cluster, n, global_batch, sync="bucketed", bucket_bytes=25 << 20):
    """The core's data-parallel StepPlan, priced: "bucketed" on GPUs, "zero1" on the CPU devices of
    one process, "parameter_device" CentralStorage's."""
    step = price_plan.replicated_plan(prof, "MirroredStrategy", n, host_replicas=sync != "bucketed",
                                      parameter_device=sync == "parameter_device", bucket_bytes=bucket_bytes)
    want = {"bucketed": "bucketed_all_reduce", "zero1": "zero1", "parameter_device": "reduce_to_device"}[sync]
    assert price_plan.sync_kind(step) == want
    return price_plan.price(step, prof, cluster, global_batch)


def test_simulator_orders_tasks_per_resource_and_detects_a_deadlock():
    sim = Simulator()
    a = sim.add("a", ("x", "y"), 1.0)      # holds both
    b = sim.add("b", "y", 2.0)
    c = sim.add("c", "x", 1.0, deps=(b,))  # after a on x, and after b
    assert sim.run().makespan == pytest.approx(4.0)
    assert (a.start, b.start, c.start) == (0.0, 1.0, 3.0)
    bad = Simulator()
    first = bad.add("first", "x", 1.0)
    second = bad.add("second", "x", 1.0)
    first.deps = (second,)  # first on x, but waiting for what runs after it on x
    with pytest.raises(RuntimeError, match="deadlock"):
        bad.run()


def test_overlapping_tasks_on_other_cores_take_their_shared_duration():
    sim = Simulator()
    a = sim.add("a", ("dev0", "core0"), 1.0, shared_duration=2.0)
    b = sim.add("b", ("dev1", "core1"), 1.0, shared_duration=2.0)  # runs beside a the whole time
    c = sim.add("c", ("dev1", "core1"), 1.0, shared_duration=2.0, deps=(a,))  # after a: alone
    d = sim.add("d", ("dev2", "core0"), 1.0, shared_duration=2.0)  # same core as a: never beside it
    timeline = sim.run()
    assert (a.duration, b.duration) == (pytest.approx(2.0), pytest.approx(2.0))
    assert d.start >= a.end
    # c starts when a ends (t = 2) and overlaps d (t = 2..) on the other core: shared too.
    assert c.start == pytest.approx(2.0) and c.duration == pytest.approx(2.0)
    assert timeline.makespan == pytest.approx(4.0)
    lone = Simulator()
    e = lone.add("e", ("dev0", "core0"), 1.0, shared_duration=3.0)
    lone.add("f", ("dev1", "core1"), 0.5, deps=(e,), shared_duration=3.0)
    assert lone.run().makespan == pytest.approx(1.5)  # one after the other: alone durations


def test_measured_points_are_interpolated_and_the_linear_fit_kept_without_them():
    layer = LayerCost(name="d", kind="Dense", params=10, activation_values=4, forward_flops=8.0, backward_flops=16.0,
                      fixed_s=1.0, per_row_s=1.0, backward_share=2 / 3, points=((1, 1.0), (4, 2.0), (8, 6.0)),
                      shared_points=((1, 2.0), (4, 4.0), (8, 12.0)))
    assert [layer.time(r) for r in (1, 2, 4, 6, 8, 10)] == pytest.approx([1.0, 4 / 3, 2.0, 4.0, 6.0, 8.0])
    assert layer.time(6, shared=True) == pytest.approx(8.0)
    assert layer.forward_time(4) + layer.backward_time(4) == pytest.approx(2.0)
    assert layer.time(0) == 0.0
    linear = dataclasses.replace(layer, points=(), shared_points=())
    assert linear.time(3) == linear.time(3, shared=True) == pytest.approx(4.0)


def test_in_flight_factor_is_measured_ratio_scaled_by_micro_batches_held():
    layer = LayerCost(name="d", kind="Dense", params=10, activation_values=4, forward_flops=8.0, backward_flops=16.0,
                      fixed_s=1.0, per_row_s=1.0, backward_share=2 / 3, points=((2, 1.0), (4, 2.0), (8, 4.0)),
                      in_flight_points=((2, 4, 1.3), (4, 2, 1.6)))  # 4 rows: faster held than alone
    assert layer.in_flight_factor(2, 1) == 1.0
    assert layer.in_flight_factor(2, 4) == pytest.approx(1.3)
    assert layer.in_flight_factor(2, 16) == pytest.approx(1.3)  # beyond the measured count: as measured
    assert layer.in_flight_factor(2, 2) == pytest.approx(1.1)   # linear in the count from 1 at one held
    assert layer.in_flight_factor(4, 2) == pytest.approx(0.8)   # back to back through warm weights
    assert layer.time(2, in_flight=4) == pytest.approx(1.3)
    assert layer.forward_time(2, in_flight=4) + layer.backward_time(2, in_flight=4) == pytest.approx(1.3)
    assert dataclasses.replace(layer, in_flight_points=()).time(2, in_flight=4) == pytest.approx(1.0)


def test_gpipe_stages_pay_the_measured_in_flight_time_and_1f1b_less():
    prof = synthetic_profile(layers=4)
    rows = (4, 8, 16, 32, 64)
    layers = tuple(dataclasses.replace(x, points=tuple((r, 1e-4 * r) for r in rows),
                                       in_flight_points=tuple((r, 64 // r, 1.5e-4 * r) for r in rows[:-1]))
                   for x in prof.layers)
    held = dataclasses.replace(prof, layers=layers)
    plain = dataclasses.replace(prof, layers=tuple(dataclasses.replace(x, in_flight_points=()) for x in layers))
    cluster = Cluster.preset("dgx-h100")
    for schedule in ("gpipe", "1f1b"):
        with_held, *_ = price_pipeline.pipeline(held, cluster, 2, 8, schedule, 1, 64, stage_starts=[2])
        without, *_ = price_pipeline.pipeline(plain, cluster, 2, 8, schedule, 1, 64, stage_starts=[2])
        # GPipe holds all 8 micro-batches (the measured 1.5x); 1F1B's first stage 2, its last 1.
        expected = 1.5 if schedule == "gpipe" else 1 + 0.5 * (2 - 1) / (8 - 1)
        assert with_held.breakdown["compute"] > without.breakdown["compute"]
        stage0 = sum(t.duration for t in with_held.timeline.tasks if t.name.startswith("stage0 ") and
                     (" F" in t.name or " B" in t.name))
        assert stage0 == pytest.approx(8 * 2 * 8e-4 * expected)


def test_measurements_set_the_core_threads_back_however_they_end():
    before = _core.cpu_thread_count()
    with core_threads(1):
        assert _core.cpu_thread_count() == 1
    assert _core.cpu_thread_count() == before
    with pytest.raises(RuntimeError, match="interrupted"):
        with core_threads(1):
            raise RuntimeError("interrupted")
    assert _core.cpu_thread_count() == before
    with core_threads(None):
        assert _core.cpu_thread_count() == before


def test_stage_timer_times_every_stage_of_the_cut_without_touching_the_model():
    model = seed_mlp()
    before = [w.copy() for w in model.get_weights()]
    for schedule in ("gpipe", "1f1b"):
        costs = stage_profile.measure_stage_costs(model, [1], 8, schedule, 4, repeats=2)
        assert len(costs) == 2 and all(f > 0 and b > 0 for f, b in costs)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    with pytest.raises(ValueError, match="stage 2 of a 2-stage"):
        _core.measure_stage_time(model._core, 0, 1, 8, "gpipe", 2, 4, 2)
    with pytest.raises(ValueError, match="is not a stage"):
        _core.measure_stage_time(model._core, 1, 1, 8, "gpipe", 2, 4, 0)
    with pytest.raises(ValueError, match="micro-batches"):
        _core.measure_stage_time(model._core, 0, 1, 8, "gpipe", 2, 1, 0)


def test_pipeline_stages_are_costed_from_the_stage_timer_when_given():
    prof = _measured_like(synthetic_profile(layers=4))
    cluster = Cluster.preset("dgx-h100")
    for schedule in ("gpipe", "1f1b"):
        from_layers, *_ = price_pipeline.pipeline(prof, cluster, 2, 8, schedule, 1, 64, stage_starts=[2])
        timed, *_ = price_pipeline.pipeline(prof, cluster, 2, 8, schedule, 1, 64, stage_starts=[2],
                                   measured_stages=[(1e-3, 2e-3), (3e-3, 6e-3)])
        assert timed.step_time_s != pytest.approx(from_layers.step_time_s)
        # Each stage's forwards and backwards take the timer's time per micro-batch.
        for s, per_mb in enumerate((3e-3, 9e-3)):
            busy = sum(t.duration for t in timed.timeline.tasks
                       if t.name.startswith(f"stage{s} ") and (" F" in t.name or " B" in t.name))
            assert busy == pytest.approx(8 * per_mb)
    with pytest.raises(ValueError, match="1 stages' costs for 2 stages"):
        price_pipeline.pipeline(prof, cluster, 2, 8, "gpipe", 1, 64, stage_starts=[2], measured_stages=[(1e-3, 2e-3)])


def test_plans_here_time_the_stages_and_presets_scale_the_layers(monkeypatch):
    model, asked = seed_mlp(), []

    def timer(model_, starts, rows, schedule, microbatches):
        asked.append((list(starts), rows, schedule, microbatches))
        return [(1e-3, 2e-3)] * (len(starts) + 1)
    monkeypatch.setattr(stage_profile, "measure_stage_costs", timer)
    prof = _measured_like(synthetic_profile(layers=4))
    plans = plan(model, 64, this_machine(), profile=prof)
    piped = [p for p in plans if p.strategy_name == "PipelineParallel" and p.applicable]
    assert piped and len(asked) == len(piped)
    assert {(tuple(a[0]), a[1], a[2], a[3]) for a in asked} == {
        (tuple(p.settings["stage_starts"]), 64 // (p.settings["microbatches"] * p.settings["mesh"][1]),
         p.settings["schedule"], p.settings["microbatches"]) for p in piped}
    asked.clear()
    plan(model, 64, gpu_cluster(hosts=1), profile=prof, this_machine_flops=1e12)
    plan(model, 64, this_machine(), profile=synthetic_profile(layers=4))  # no measured points: layers
    assert asked == []


def test_profile_is_taken_at_the_rows_asked_for_alone_and_shared():
    prof = profile_model(seed_mlp(), rows=profile_rows(8), repeats=1, step_costs=False)
    assert prof.rows_measured == (1, 2, 4, 8)
    for layer in prof.layers:
        assert [r for r, _ in layer.points] == [1, 2, 4, 8]
        times = [t for _, t in layer.points]
        assert all(t > 0 for t in times) and times == sorted(times)
        if (os.cpu_count() or 1) > 1:
            assert prof.shared_by == os.cpu_count() and [r for r, _ in layer.shared_points] == [1, 2, 4, 8]
        # Held as a GPipe stage of the whole 8 rows holds them: 8 x 1 row, 4 x 2, 2 x 4.
        assert [(r, k) for r, k, _ in layer.in_flight_points] == [(1, 8), (2, 4), (4, 2)]
        assert all(t > 0 for _, _, t in layer.in_flight_points)
    assert profile_rows(64) == (1, 2, 4, 8, 16, 32, 64) and profile_rows(48)[-2:] == (32, 48)
    for bad in (0, -4, 2.5):
        with pytest.raises(ValueError, match="row count"):
            profile_rows(bad)
    with pytest.raises(ValueError, match="rows"):
        profile_model(seed_mlp(), rows=(0, 4))


def test_a_shared_timing_is_the_slowest_threads():
    """Timed beside competing copies, a point reads the slowest thread's median: replicas in step
    wait for the slowest core. A fake timer stands for the core: the timing thread's layers take
    1 and 2 ns per row, the competing thread's (a core whose sibling hyperthread is busy) 3x that;
    each of the timing thread's calls waits until the competitor has timed 3 more, so it has a
    median whatever the machine's load. A competitor's row count with fewer timings than that
    (one it only passed through) is not a median and does not count."""
    import threading
    from mdtrain.plan import profile as profile_module

    main = threading.get_ident()
    competed = threading.Condition()
    count = [0]

    class FakeCore:
        def __init__(self, competing):
            self.competing = competing

        def measure_layer_times(self, model, rows, repeats, in_flight=1):
            if threading.get_ident() != main:
                with competed:
                    count[0] += 1
                    competed.notify_all()
                return np.array([3.0, 6.0]) * rows
            if self.competing:
                with competed:
                    target = count[0] + 3
                    assert competed.wait_for(lambda: count[0] >= target, timeout=60)
            return np.array([1.0, 2.0]) * rows

    class FakeModel:
        _core = None

    times = profile_module._median_layer_times(FakeCore(True), FakeModel(), [(8, 1)], repeats=5, shared_by=2)
    np.testing.assert_allclose(times, np.array([[24.0, 48.0]]) * 1e-9)
    alone = profile_module._median_layer_times(FakeCore(False), FakeModel(), [(8, 1)], repeats=5)
    np.testing.assert_allclose(alone, np.array([[8.0, 16.0]]) * 1e-9)
    own = [[1.0, 2.0], [1.0, 2.0], [9.0, 9.0]]  # a median: one interrupted timing does not count
    np.testing.assert_allclose(profile_module._slowest_median(own, [[[3.0, 1.0]] * 3]), [3.0, 2.0])
    np.testing.assert_allclose(profile_module._slowest_median(own, [[[3.0, 6.0]] * 2]), [1.0, 2.0])


def test_step_costs_of_a_model_compiled_with_a_string_sparse_loss():
    # compile turns the string into a Loss whose class is the generic one: the probe must read the
    # loss's name to feed it class ids (it fed one-hot-shaped targets and failed before).
    model = seed_mlp()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    prof = profile_model(model, rows=(1, 2, 4), repeats=1)
    assert prof.update_s is not None and prof.update_s > 0


# ---- α–β ----------------------------------------------------------------------------------------

def test_alpha_beta_fit_recovers_known_parameters():
    alpha, beta = 12e-6, 1 / 7e9
    sizes = np.array([1 << k for k in range(10, 28, 2)], dtype=np.float64)
    noise = 1 + 0.01 * np.random.default_rng(0).standard_normal(len(sizes))
    fit = fit_alpha_beta(sizes, (alpha + beta * sizes) * noise)
    assert fit.alpha == pytest.approx(alpha, rel=0.05)
    assert fit.beta == pytest.approx(beta, rel=0.02)


def test_measured_transfer_reads_its_points_and_keeps_the_fit():
    from mdtrain.plan.alpha_beta import MeasuredTransfer, measured_transfer
    sizes = [4e3, 1e6, 16e6, 64e6]
    seconds = [10e-6, 50e-6, 2e-3, 10e-3]  # the per-byte cost grows past the caches
    t = measured_transfer(sizes, seconds)
    assert isinstance(t, MeasuredTransfer) and isinstance(t, AlphaBeta)
    fit = fit_alpha_beta(sizes, seconds)
    assert (t.alpha, t.beta) == (fit.alpha, fit.beta)
    assert [t.time(s) for s in sizes] == pytest.approx(seconds)
    assert t.time(40e6) == pytest.approx(6e-3)            # between 16 and 64 MB
    assert t.time(128e6) == pytest.approx(10e-3 + 8e-3 / 48e6 * 64e6)  # the last segment's slope beyond
    assert t.time(1e3) == pytest.approx(10e-6)            # not cheaper than the smallest measured
    assert abs(fit.time(40e6) - 6e-3) > 1e-3              # what one line would have said
    assert MeasuredTransfer(1e-6, 1e-9).time(1e3) == pytest.approx(2e-6)  # no points: the line


def test_alpha_beta_fit_of_a_benchmark_json(tmp_path):
    rows = [{"bytes": s, "ranks": 2, "time_us": (5e-6 + s / 2e9) * 1e6} for s in (1 << 10, 1 << 16, 1 << 22)]
    rows += [{"bytes": 1 << 20, "ranks": 4, "time_us": 1e6}]  # another group size: ignored
    path = tmp_path / "allreduce.json"
    path.write_text(json.dumps({"results": rows}))
    fit = fit_benchmark_json(str(path), ranks=2)
    assert fit.alpha == pytest.approx(5e-6, rel=1e-3) and fit.bandwidth == pytest.approx(2e9, rel=1e-3)


@pytest.mark.parametrize("sizes,seconds", [([1, 1], [1.0, 2.0]), ([1, 2], [1.0]), ([1, 2], [0.0, 1.0])])
def test_alpha_beta_fit_rejects_unusable_input(sizes, seconds):
    with pytest.raises(ValueError, match="fit_alpha_beta"):
        fit_alpha_beta(sizes, seconds)


# ---- this machine's shared cores, MPI processes and pipeline messages ----------------------------

def cpu_cluster(devices=4, cores=None, **fields):
    """A cluster like Cluster.measure()'s (blocking CPU collectives), with known figures."""
    return dataclasses.replace(gpu_cluster(hosts=1, overlaps=False), devices_per_host=devices, cores=cores,
                               **fields)


def test_devices_sharing_fewer_cores_are_not_faster_than_the_cores_compute():
    prof = synthetic_profile(per_row=1e-5)
    shared = data_parallel(prof, cpu_cluster(4, cores=2), 4, 256, sync="zero1")
    own = data_parallel(prof, cpu_cluster(4, cores=None), 4, 256, sync="zero1")
    two = data_parallel(prof, cpu_cluster(2, cores=2), 2, 256, sync="zero1")
    # 4 devices on 2 cores: at most 2 compute at once, so the step is at least the compute of 2
    # devices splitting the batch; with a core each it is shorter.
    assert shared.step_time_s >= prof.time(128) - 1e-12
    assert shared.step_time_s >= two.breakdown["compute"] - 1e-12
    assert own.step_time_s < shared.step_time_s
    # When other work leaves the 2 cores only one core's worth of concurrent work (the measured
    # concurrent_speedup), 2 devices are replayed on one core: no faster than one device's compute
    # of the whole batch.
    busy = data_parallel(prof, cpu_cluster(2, cores=2, concurrent_speedup=1.0), 2, 256, sync="zero1")
    assert busy.step_time_s >= prof.time(256) - 1e-12 > two.step_time_s
    tp_shared = price_tensor_parallel.tensor_parallel(prof, cpu_cluster(4, cores=1), 4, 1, 256)[0]
    tp_own = price_tensor_parallel.tensor_parallel(prof, cpu_cluster(4, cores=None), 4, 1, 256)[0]
    assert tp_shared.step_time_s >= prof.time(256) - 1e-12 > tp_own.step_time_s


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_step_grows_with_the_measured_message_cost_times_messages(schedule):
    prof = synthetic_profile(layers=4)
    h = 1e-3
    for m in (2, 4, 8):
        free = price_pipeline.pipeline(prof, cpu_cluster(2), 2, m, schedule, 1, 64)[0]
        costly = price_pipeline.pipeline(prof, cpu_cluster(2, pipeline_message_s=h), 2, m, schedule, 1, 64)[0]
        # Each stage waits in m receives (activations on stage 1, gradients on stage 0).
        assert m * h - 1e-12 <= costly.step_time_s - free.step_time_s <= 2 * m * h + 1e-12
        assert costly.breakdown["communication"] >= m * h - 1e-12
        assert sum(costly.breakdown.values()) == pytest.approx(costly.step_time_s, rel=1e-6)


def test_multi_worker_on_one_host_is_costed_from_the_measured_mpi_figures():
    model = seed_mlp()
    prof = synthetic_profile()
    slow_mpi = AlphaBeta(5e-3, 0.0)
    cluster = cpu_cluster(2, cores=2, mpi_processes=((2, slow_mpi, 1e-3), (4, slow_mpi, 2e-3)))
    plans = plan(model, 64, cluster, profile=prof, this_machine_flops=cluster.peak_flops)
    mw = {p.num_devices: p for p in plans if p.strategy_name == "MultiWorkerMirroredStrategy"}
    assert set(mw) == {2, 4} and all(p.applicable for p in mw.values())
    mirrored = next(p for p in plans if p.strategy_name == "MirroredStrategy" and p.num_devices == 2)
    # One 25 MiB bucket all-reduced in 5 ms plus the 1 ms step cost, on top of the same compute.
    assert mw[2].step_time_s >= mirrored.breakdown["compute"] + 6e-3 - 1e-12
    assert "sharing 2 cores" in mw[4].why and mw[4].settings["workers"] == 4
    # Without MPI figures they stay skipped, saying why.
    plans = plan(model, 64, cpu_cluster(2, cores=2), profile=prof, this_machine_flops=cluster.peak_flops)
    assert all("not measured" in p.skipped for p in plans if p.strategy_name == "MultiWorkerMirroredStrategy")


def test_collectives_of_devices_of_one_host_use_the_threads_communicators_measured_ones():
    from mdtrain.plan import collectives
    slow = AlphaBeta(1e-3, 1e-9)
    cluster = cpu_cluster(4, cores=2, threads_all_reduce=((4, slow),))
    assert collectives.all_reduce(1e6, 4, cluster) == pytest.approx(slow.time(1e6))
    assert collectives.reduce_scatter(1e6, 4, cluster) == pytest.approx(slow.time(1e6) / 2)
    # Another group size keeps the link's ring model.
    assert collectives.all_reduce(1e6, 2, cluster) == collectives.all_reduce(1e6, 2, cpu_cluster(4, cores=2))
    zero = data_parallel(synthetic_profile(), cluster, 4, 64, sync="zero1")
    assert zero.breakdown["communication"] >= slow.time(synthetic_profile().param_bytes) - 1e-12
    # A reduce onto one device and a broadcast use their own measured fits where there are some.
    reduce, bcast = AlphaBeta(2e-3, 2e-9), AlphaBeta(3e-3, 3e-9)
    measured = cpu_cluster(4, cores=2, threads_reduce=((4, reduce),), threads_broadcast=((4, bcast),))
    assert collectives.reduce_to_one(1e6, 4, measured) == pytest.approx(reduce.time(1e6))
    assert collectives.broadcast(1e6, 4, measured) == pytest.approx(bcast.time(1e6))
    link = cpu_cluster(4, cores=2).intra_host
    assert collectives.reduce_to_one(1e6, 2, measured) == pytest.approx(link.alpha + link.beta * 1e6)
    central = data_parallel(synthetic_profile(), measured, 4, 64, sync="parameter_device")
    nbytes = synthetic_profile().param_bytes
    assert central.breakdown["communication"] >= reduce.time(nbytes) + bcast.time(nbytes) - 1e-12


def test_ps_probe_measures_the_zeromq_transport_and_a_step_besides_it():
    pull, push, source = ps_probe.measure_ps_transport(repeats=2)
    if not _core.zmq_available():
        assert pull is None and push is None and "not measured" in source
        pytest.skip(source)
    for fit in (pull, push):
        assert fit.alpha > 0 and 0 < fit.bandwidth < float("inf")
    assert "ZeroMQ" in source
    with pytest.raises(ValueError, match="repeats"):
        ps_probe.measure_ps_transport(repeats=0)
    # The one-weight steps on a LocalCluster: a positive fixed cost per step, and the bytes of its
    # batch costing something (drawn in Python and handed to the core).
    step, source = ps_probe.measure_ps_step(steps=100, repeats=2)
    assert step is not None, source
    assert step.alpha > 0 and step.beta >= 0 and "LocalCluster" in source
    cluster = this_machine(ps_step_overhead=step)
    assert ps_probe.ps_step_overhead(cluster, synthetic_profile(), 64) == pytest.approx(
        step.time(64 * (synthetic_profile().input_values + 1) * 4))
    assert ps_probe.ps_step_overhead(this_machine(), synthetic_profile(), 64) == 0.0


def this_machine(**fields):
    """A cluster named as Cluster.measure()'s (so the planner costs it as this machine), known figures."""
    return dataclasses.replace(cpu_cluster(2, cores=2), name="this-machine", **fields)


def test_collective_timer_runs_the_calls_in_the_core_and_refuses_bad_arguments():
    import threading

    from mdtrain.plan.collective_timer import time_collective
    comms = _core.make_communicators("threads", 2)
    bufs = [np.ones(1000, np.float32) for _ in comms]
    seconds = [None, None]

    def run(rank, op, calls):
        seconds[rank] = _core.time_collective_calls(comms[rank], bufs[rank], op, calls)

    def both(op, calls):
        th = threading.Thread(target=run, args=(1, op, calls))
        th.start()
        run(0, op, calls)
        th.join()

    both("all_reduce", 3)  # three sums in place: 1 -> 2 -> 4 -> 8
    assert all(np.all(b == 8.0) for b in bufs) and all(t > 0 for t in seconds)
    bufs[1][:] = 5.0
    both("broadcast", 2)  # rank 0's values to rank 1
    assert np.all(bufs[1] == 8.0)
    both("reduce", 1)  # onto rank 0 only
    assert np.all(bufs[0] == 16.0) and np.all(bufs[1] == 8.0)
    with pytest.raises(ValueError, match="op must be"):
        _core.time_collective_calls(comms[0], bufs[0], "all_gather", 1)
    with pytest.raises(ValueError, match="calls must be >= 1"):
        _core.time_collective_calls(comms[0], bufs[0], "all_reduce", 0)
    frozen = np.ones(4, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        _core.time_collective_calls(comms[0], frozen, "all_reduce", 1)
    with pytest.raises(ValueError, match="op must be one of"):
        time_collective(comms[0], 4096, 1, 1, op="gather")


def test_updates_overlapping_other_cores_take_the_measured_shared_update():
    # Two replicas on two cores update at once: each update is charged the model's update as timed
    # beside a fitting copy (update_shared_s), pro rata; without that measurement, alone.
    prof = dataclasses.replace(_measured_like(synthetic_profile(layers=2)), shared_by=2, update_s=1e-3)
    contended = dataclasses.replace(prof, update_shared_s=3e-3)

    def updates(profile, sync):
        result = data_parallel(profile, this_machine(), 2, 64, sync=sync)
        return [t.duration for t in result.timeline.tasks if t.category == "update"]

    assert updates(prof, "bucketed") == pytest.approx([1e-3, 1e-3])
    assert updates(contended, "bucketed") == pytest.approx([3e-3, 3e-3])
    assert updates(contended, "zero1") == pytest.approx([1.5e-3, 1.5e-3])  # each its half, at the shared rate
    lone = data_parallel(contended, this_machine(), 1, 64)  # nothing beside it: alone
    assert [t.duration for t in lone.timeline.tasks if t.category == "update"] == pytest.approx([1e-3])


def test_profile_times_the_update_alone_and_beside_a_fitting_copy_per_other_core():
    model = seed_mlp()
    before = [w.copy() for w in model.get_weights()]
    prof = profile_model(model, rows=(4, 8), repeats=1, in_flight=False)
    assert prof.update_s > 0
    if (os.cpu_count() or 1) > 1:
        assert prof.update_shared_s > 0
    else:
        assert prof.update_shared_s is None
    alone = profile_model(model, rows=(4, 8), repeats=1, threads=None, in_flight=False)
    assert alone.update_s > 0 and alone.update_shared_s is None  # one replica alone: nothing to share with
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))  # copies were trained


def test_parameter_servers_here_are_costed_from_the_measured_transport():
    model, prof = seed_mlp(), synthetic_profile()
    transport = AlphaBeta(50e-6, 1 / 2e9)
    plans = plan(model, 64, this_machine(ps_transport=transport, ps_source="test"), profile=prof)
    servers = [p for p in plans if p.strategy_name == "ParameterServerStrategy"]
    keys = set(next(p for p in plans if p.strategy_name == "MirroredStrategy").breakdown)
    assert sorted(p.settings["num_ps"] for p in servers) == [1, 2, 4]
    for p in servers:
        assert p.applicable, p.skipped
        assert set(p.breakdown) == keys
        assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=1e-6)
        # Every update is one pull and one push of the whole model through the servers, which
        # handle one request at a time.
        assert p.step_time_s >= 2 * transport.time(prof.param_bytes) - 1e-12
        # An update is never cheaper than one worker's compute of its batch (here also implied by
        # the bound above: the workers have a core each, and a pull takes longer than the compute).
        assert p.step_time_s >= prof.time(64) - 1e-12
        assert p.settings["mode"] == "asynchronous" and p.settings["rows_per_step"] == 64
        assert p.settings["steps_per_execution"] == ps_probe.PS_STEPS_PER_EXECUTION
    # A slower transport is never faster.
    slow = plan(model, 64, this_machine(ps_transport=AlphaBeta(50e-6, 1 / 0.5e9)), profile=prof)
    slow = {p.settings["num_ps"]: p for p in slow if p.strategy_name == "ParameterServerStrategy"}
    assert all(slow[p.settings["num_ps"]].step_time_s >= p.step_time_s - 1e-12 for p in servers)
    # A measured cost per worker step besides its pull, compute and push lengthens each step of
    # the two workers (each on its own core) by 1 ms: every update by half of that at least.
    looped = plan(model, 64, this_machine(ps_transport=transport, ps_step_overhead=AlphaBeta(1e-3, 0.0)),
                  profile=prof)
    looped = {p.settings["num_ps"]: p for p in looped if p.strategy_name == "ParameterServerStrategy"}
    assert all(looped[p.settings["num_ps"]].step_time_s >= p.step_time_s + 0.5e-3 - 1e-9 for p in servers)
    # Processes of one thread each (MDTRAIN_CPU_THREADS=1): two workers compute on their own cores.
    threads1 = price_parameter_servers.parameter_servers_async(prof, this_machine(), 2, 1, 64, transport, process_threads=1)
    every = price_parameter_servers.parameter_servers_async(prof, this_machine(), 2, 1, 64, transport)
    assert threads1.step_time_s <= every.step_time_s + 1e-12
    with pytest.raises(ValueError, match="process_threads"):
        price_parameter_servers.parameter_servers_async(prof, this_machine(), 2, 1, 64, transport, process_threads=0)
    # One worker: each update is its whole step (pull, compute, push, apply) one after another.
    one = price_parameter_servers.parameter_servers_async(prof, this_machine(devices_per_host=1), 1, 1, 64, transport)
    apply = step_costs.update_seconds(prof.params, 2, this_machine(), prof)
    assert one.step_time_s == pytest.approx(2 * transport.time(prof.param_bytes) + prof.time(64) + apply, rel=1e-6)
    # With the measured push (its round trip applied SGD: 3 of Adam's 7 streams of the update) and
    # the step's cost besides the pull, compute and push, both in series on the worker.
    push = AlphaBeta(80e-6, 1 / 1e9)
    full = price_parameter_servers.parameter_servers_async(prof, this_machine(devices_per_host=1), 1, 1, 64, transport,
                                         push_transport=push, step_overhead_s=1e-4)
    assert full.step_time_s == pytest.approx(1e-4 + transport.time(prof.param_bytes) + prof.time(64) +
                                             push.time(prof.param_bytes) + apply * 4 / 7, rel=1e-6)


def test_parameter_servers_here_stay_skipped_without_the_measurement():
    plans = plan(seed_mlp(), 64, this_machine(ps_source="parameter-server transport not measured: no ZeroMQ"),
                 profile=synthetic_profile())
    servers = [p for p in plans if p.strategy_name == "ParameterServerStrategy"]
    assert len(servers) == 3 and all(p.skipped == "parameter-server transport not measured: no ZeroMQ"
                                     for p in servers)
    plans = plan(seed_mlp(), 64, this_machine(), profile=synthetic_profile())
    assert all("not measured" in p.skipped for p in plans if p.strategy_name == "ParameterServerStrategy")
    with pytest.raises(ValueError, match="transport"):
        price_parameter_servers.parameter_servers_async(synthetic_profile(), this_machine(), 2, 1, 64, None)


# ---- against measurement ------------------------------------------------------------------------

def test_prediction_of_the_seed_mlp_is_the_measured_order_of_magnitude(logical_cpus):
    """Predicted vs measured step of the seed MLP under Mirrored on 1 and 2 logical devices. The
    machine running the tests is shared and loaded, so only the order of magnitude is asserted
    (within 10x: on this machine the errors of the table reach 70 %, and a
    build beside the test can slow a step several times; a unit or structure error is 1000x);
    the accuracy table is bench/plan_accuracy.py's (bench/RESULTS.md)."""
    logical_cpus(2)
    cluster = Cluster.measure(devices=2)
    plans = plan(seed_mlp(), 64, cluster)
    # Parameter servers are costed from the ZeroMQ transport Cluster.measure timed (ps_probe.py),
    # or listed as skipped saying why when it could not be; MultiWorkerMirrored is costed from MPI
    # measured by Cluster.measure when MPI is there.
    servers = [p for p in plans if p.strategy_name == "ParameterServerStrategy"]
    assert sorted(p.settings["num_ps"] for p in servers) == [1, 2, 4]
    if _core.zmq_available():
        assert cluster.ps_transport is not None, cluster.ps_source
        keys = set(next(p for p in plans if p.strategy_name == "MirroredStrategy").breakdown)
        for p in servers:
            assert p.applicable, p.skipped
            assert set(p.breakdown) == keys and p.step_time_s > 0
            assert p.settings["mode"] == "asynchronous" and "asynchronous" in p.why
        assert "PS pull" in str(cluster)
    else:
        assert all("not measured" in p.skipped for p in servers)
    workers = [p for p in plans if p.strategy_name == "MultiWorkerMirroredStrategy"]
    if probes.mpi_available():
        assert cluster.mpi_workers() == (2,), cluster.mpi_source
        assert [p.num_devices for p in workers if p.applicable] == [2]
    else:
        assert all("not measured" in p.skipped for p in workers)
    assert cluster.pipeline_message_s is not None and cluster.pipeline_message_s >= 0
    # The threads communicator's collectives of 2 ranks, each measured (a 64 MB one costs more
    # than a 4 KB one), and CentralStorage's reduce + broadcast costed from them.
    for fits in (cluster.threads_all_reduce, cluster.threads_reduce, cluster.threads_broadcast):
        assert [n for n, _ in fits] == [2]
        assert 0 < fits[0][1].time(4 << 10) < fits[0][1].time(64 << 20)
    assert "threads reduce x2" in str(cluster) and "threads broadcast x2" in str(cluster)
    rng = np.random.default_rng(0)
    x = rng.random((64 * 30, 784), dtype=np.float32)
    y = rng.integers(0, 10, 64 * 30)
    for devices, name in ((["/cpu:0"], "OneDeviceStrategy"), (["/cpu:0", "/cpu:1"], "MirroredStrategy")):
        with tf.distribute.MirroredStrategy(devices).scope():
            model = seed_mlp()
        model.fit(x[:320], y[:320], batch_size=64, epochs=1, verbose=0)
        measured = float("inf")
        for _ in range(3):  # the best of three, as the planner's timings are
            model._core.reset_profile()
            model.fit(x, y, batch_size=64, epochs=1, verbose=0, shuffle=False)
            measured = min(measured, model.step_time_breakdown()["step"])
        predicted = next(p for p in plans if p.strategy_name == name and p.applicable).step_time_s
        assert measured / 10 < predicted < measured * 10, (name, predicted, measured)


def test_mirrored_rows_take_their_sync_from_the_cores_plan():
    """The planner does not assume ZeRO-1 on host devices: under clipnorm the core's plan (and so
    the executor) all-reduces before the sharded update, and the rows say so."""
    prof = synthetic_profile()
    cluster = cpu_cluster(4, cores=None)
    plain = seed_mlp()
    clipped = seed_mlp()
    clipped.compile(optimizer=tf.keras.optimizers.Adam(clipnorm=1.0),
                    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rows = {}
    for name, model in (("plain", plain), ("clipped", clipped)):
        plans = plan(model, 64, cluster, profile=prof, this_machine_flops=cluster.peak_flops)
        rows[name] = [p for p in plans if p.strategy_name == "MirroredStrategy" and p.applicable]
    assert rows["plain"] and all(p.settings == {"gradient_sync": "zero1"} for p in rows["plain"])
    assert rows["clipped"] and all(p.settings["gradient_sync"] == "zero1_after_all_reduce" for p in rows["clipped"])
    assert {p.settings["bucket_bytes"] for p in rows["clipped"] if p.num_devices == 4} == {"25MiB", "4MiB", "1MiB"}
