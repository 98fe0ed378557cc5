"""The planner prices a pipeline from the core's StepPlan (price_pipeline.py): on GPipe and 1F1B, 2 to 16
micro-batches, one and two pipelines, layer-profiled and stage-timed stages, contended cores and
scaled compute, the plan's pricing gives the figures the planner's own description of the pipeline
gave (recorded in EXPECTED from steps.pipeline before it was replaced, rel 1e-9); the priced ops
are the plan's (bytes, rows, sync); and the planner considers WavefrontPipeline for recurrent
models, priced from its plan."""
import dataclasses
import math

import pytest

from mdtrain import _core
from mdtrain.plan import AlphaBeta, Cluster, ModelProfile, price_pipeline
from mdtrain.plan.profile import LayerCost

def synthetic_profile(layers=4, units=256, per_row=1e-6, fixed=1e-5, params=None):
    costs = tuple(LayerCost(name=f"dense_{i}", kind="Dense", params=units * units + units if params is None else params[i],
                            activation_values=units + 8 * i, forward_flops=2.0 * units * units,
                            backward_flops=4.0 * units * units, fixed_s=fixed * (1 + i), per_row_s=per_row * (1 + 0.5 * i),
                            backward_share=2 / 3) for i in range(layers))
    return ModelProfile(name="synthetic", layers=costs, input_values=units, optimizer="adam", optimizer_slots=2,
                        rows_measured=(16, 128), threads=1)


def measured(prof, rows=(1, 2, 4, 8, 16, 32, 64, 128)):
    return dataclasses.replace(prof, layers=tuple(dataclasses.replace(
        x, points=tuple((r, x.time(r)) for r in rows),
        in_flight_points=tuple((r, 4, 1.2 * x.time(r)) for r in rows[:-1])) for x in prof.layers))


def gpu_cluster(hosts=2, bandwidth=50e9):
    return Cluster(name="test", hosts=hosts, devices_per_host=8, peak_flops=1e14, memory_bytes=80e9,
                   memory_bandwidth=2e12, intra_host=AlphaBeta(3e-6, 1 / (8 * bandwidth)),
                   inter_host=AlphaBeta(5e-6, 1 / bandwidth), overlaps_communication=True, source="test figures")


def cpu_cluster(devices=4, cores=None, **fields):
    c = dataclasses.replace(gpu_cluster(hosts=1), overlaps_communication=False, devices_per_host=devices, cores=cores,
                            **fields)
    return c


def cases():
    """(id, profile, cluster, p, m, schedule, dp, global_batch, kwargs)."""
    out = []
    base = synthetic_profile(layers=6)
    meas = measured(base)
    shared = dataclasses.replace(meas, shared_by=2)
    clusters = {"gpu2": gpu_cluster(), "dgx": Cluster.preset("dgx-h100"),
                "cpu": cpu_cluster(4, cores=2, pipeline_message_s=2e-5, pipeline_step_overhead_s=1e-4),
                "cpu_nomsg": cpu_cluster(4, cores=None)}
    for schedule in ("gpipe", "1f1b"):
        for m in (2, 4, 8, 16):
            for dp in (1, 2):
                out.append((f"{schedule}_m{m}_dp{dp}_gpu", base, clusters["gpu2"], 2, m, schedule, dp, 64 * m * dp, {}))
            out.append((f"{schedule}_m{m}_p2_cpu_shared", shared, clusters["cpu"], 2, m, schedule, 1, 32 * m, {}))
            out.append((f"{schedule}_m{m}_p2_measured", shared, clusters["cpu"], 2, m, schedule, 1, 32 * m,
                        {"measured_stages": [(1e-3, 2.1e-3), (1.3e-3, 2.4e-3)]}))
        out.append((f"{schedule}_p4_dp2_dgx", meas, clusters["dgx"], 4, 8, schedule, 2, 512, {"stage_starts": [1, 3, 4]}))
        out.append((f"{schedule}_p4_scaled", meas, clusters["cpu_nomsg"], 4, 4, schedule, 1, 64, {"scale": 0.37}))
        out.append((f"{schedule}_p4_dp2_measured_dgx", meas, clusters["dgx"], 4, 4, schedule, 2, 256,
                    {"measured_stages": [(1e-3, 2e-3), (2e-3, 3e-3), (1.5e-3, 2.5e-3), (1e-3, 1e-3)]}))
        out.append((f"{schedule}_p4_stage_costs", base, clusters["gpu2"], 4, 8, schedule, 1, 8,
                    {"stage_costs": [(1.0, 2.0)] * 4}))
    return out


def figures(result):
    step, bubble, span = result
    return (step.step_time_s, step.breakdown["compute"], step.breakdown["communication"], step.breakdown["update"],
            step.breakdown["bubble"], step.memory_per_device_bytes, bubble, span)


EXPECTED = {  # (step, compute, communication, update, bubble, memory, bubble, span) of steps.pipeline
    'gpipe_m2_dp1_gpu': (0.001632042752, 0.0010739999999999999, 9.210880000001635e-07, 2.763264e-06, 0.0005543584, 4890624.0, 0.0005543584, 0.0016283584),
    'gpipe_m2_dp2_gpu': (0.001640674432, 0.0010739999999999999, 9.552768000000095e-06, 2.763264e-06, 0.0005543584, 4890624.0, 0.0005543584, 0.0016283584),
    'gpipe_m2_p2_cpu_shared': (0.0012181302186666668, 0.0006848, 0.00014092108800000015, 2.763264e-06, 0.00038964586666666675, 4550656.0, 0.00038964586666666675, 0.0011144458666666667),
    'gpipe_m2_p2_measured': (0.010669863552, 0.006799999999999999, 0.0001409210880000001, 2.763264e-06, 0.0037261792000000005, 4550656.0, 0.0037261792000000005, 0.0105661792),
    'gpipe_m4_dp1_gpu': (0.002728042752, 0.002148, 9.210879999998383e-07, 2.763264e-06, 0.0005763584, 5570560.0, 0.0005763584, 0.0027243584),
    'gpipe_m4_dp2_gpu': (0.002736674432, 0.002148, 9.552767999999987e-06, 2.763264e-06, 0.0005763584, 5570560.0, 0.0005763584, 0.0027243584),
    'gpipe_m4_p2_cpu_shared': (0.002199463552, 0.0015408000000000002, 0.00018092108799999966, 2.763264e-06, 0.0004749792000000002, 4890624.0, 0.0004749792000000002, 0.0020957792000000004),
    'gpipe_m4_p2_measured': (0.018109863551999998, 0.013599999999999998, 0.00018092108799999847, 2.763264e-06, 0.004326179200000002, 4890624.0, 0.004326179200000002, 0.0180061792),
    'gpipe_m8_dp1_gpu': (0.004920042751999999, 0.0042959999999999995, 9.210880000002719e-07, 2.763264e-06, 0.0006203583999999994, 6930432.0, 0.0006203583999999994, 0.004916358399999999),
    'gpipe_m8_dp2_gpu': (0.004928674431999999, 0.0042959999999999995, 9.55276800000042e-06, 2.763264e-06, 0.0006203583999999994, 6930432.0, 0.0006203583999999994, 0.004916358399999999),
    'gpipe_m8_p2_cpu_shared': (0.0039050635520000024, 0.003081600000000001, 0.00026092108799999944, 2.763264e-06, 0.0005597792000000019, 5570560.0, 0.0005597792000000019, 0.003801379200000003),
    'gpipe_m8_p2_measured': (0.03298986355199999, 0.0272, 0.0002609210880000056, 2.763264e-06, 0.0055261791999999844, 5570560.0, 0.0055261791999999844, 0.03288617919999998),
    'gpipe_m16_dp1_gpu': (0.009304042752, 0.008591999999999999, 9.210880000007056e-07, 2.763264e-06, 0.0007083584000000011, 9650176.0, 0.0007083584000000011, 0.0093003584),
    'gpipe_m16_dp2_gpu': (0.009312674432, 0.008591999999999999, 9.552767999999987e-06, 2.763264e-06, 0.0007083584000000011, 9650176.0, 0.0007083584000000011, 0.0093003584),
    'gpipe_m16_p2_cpu_shared': (0.0073162635520000055, 0.006163200000000003, 0.00042092108799999996, 2.763264e-06, 0.0007293792000000023, 6930432.0, 0.0007293792000000023, 0.0072125792000000055),
    'gpipe_m16_p2_measured': (0.06274986355199998, 0.05439999999999999, 0.00042092108800000604, 2.763264e-06, 0.00792617919999998, 6930432.0, 0.00792617919999998, 0.06264617919999997),
    'gpipe_p4_dp2_dgx': (0.003467194383283583, 0.0015408000000000002, 6.3098661359866325e-06, 8.248549253731343e-07, 0.0019192596622222232, 2965504.0, 0.0019192596622222232, 0.0034600596622222234),
    'gpipe_p4_scaled': (0.0003860000640000001, 0.00018914399999999998, 1.3816320000000013e-06, 1.381632e-06, 0.0001940928000000001, 3426304.0, 0.0001940928000000001, 0.00038323680000000007),
    'gpipe_p4_dp2_measured_dgx': (0.02902788202985075, 0.014, 8.579308258708368e-06, 8.248549253731344e-07, 0.01501847786666667, 3694592.0, 0.01501847786666667, 0.02901847786666667),
    'gpipe_p4_stage_costs': (33.0, 24.0, 0.0, 0.0, 9.0, 0.0, 9.0, 33.0),
    '1f1b_m2_dp1_gpu': (0.0016100427520000001, 0.0010739999999999999, 9.210880000001635e-07, 2.763264e-06, 0.0005323584000000002, 4890624.0, 0.0005323584000000002, 0.0016063584000000001),
    '1f1b_m2_dp2_gpu': (0.001618674432, 0.0010739999999999999, 9.552768000000095e-06, 2.763264e-06, 0.0005323584000000002, 4890624.0, 0.0005323584000000002, 0.0016063584000000001),
    '1f1b_m2_p2_cpu_shared': (0.0011514635520000003, 0.0006636000000000001, 0.000140921088, 2.763264e-06, 0.00034417920000000024, 4550656.0, 0.00034417920000000024, 0.0010477792000000003),
    '1f1b_m2_p2_measured': (0.010669863552, 0.006799999999999999, 0.0001409210880000001, 2.763264e-06, 0.0037261792000000005, 4550656.0, 0.0037261792000000005, 0.0105661792),
    '1f1b_m4_dp1_gpu': (0.002712401152, 0.0021479999999999997, 9.210880000002719e-07, 2.763264e-06, 0.0005607168, 4890624.0, 0.0005607168, 0.0027087168),
    '1f1b_m4_dp2_gpu': (0.002721032832, 0.0021479999999999997, 9.55276800000042e-06, 2.763264e-06, 0.0005607168, 4890624.0, 0.0005607168, 0.0027087168),
    '1f1b_m4_p2_cpu_shared': (0.001888842752, 0.0013271999999999997, 0.0001809210880000003, 2.763264e-06, 0.0003779584, 4550656.0, 0.0003779584, 0.0017851584),
    '1f1b_m4_p2_measured': (0.018109863551999995, 0.013599999999999998, 0.00018092108799999847, 2.763264e-06, 0.004326179199999999, 4550656.0, 0.004326179199999999, 0.018006179199999996),
    '1f1b_m8_dp1_gpu': (0.0049044011519999995, 0.0042959999999999995, 9.210880000002719e-07, 2.763264e-06, 0.0006047167999999998, 4890624.0, 0.0006047167999999998, 0.0049007168),
    '1f1b_m8_dp2_gpu': (0.004913032832, 0.0042959999999999995, 9.55276800000042e-06, 2.763264e-06, 0.0006047167999999998, 4890624.0, 0.0006047167999999998, 0.0049007168),
    '1f1b_m8_p2_cpu_shared': (0.003351242752000001, 0.0026544, 0.00026092108799999965, 2.763264e-06, 0.00043315840000000133, 4550656.0, 0.00043315840000000133, 0.0032475584000000012),
    '1f1b_m8_p2_measured': (0.03298986355199999, 0.027199999999999995, 0.0002609210880000091, 2.763264e-06, 0.0055261791999999844, 4550656.0, 0.0055261791999999844, 0.03288617919999998),
    '1f1b_m16_dp1_gpu': (0.009288401152, 0.008592000000000002, 9.210879999972362e-07, 2.763264e-06, 0.0006927167999999997, 4890624.0, 0.0006927167999999997, 0.009284716799999999),
    '1f1b_m16_dp2_gpu': (0.009297032831999999, 0.008592000000000002, 9.552767999996517e-06, 2.763264e-06, 0.0006927167999999997, 4890624.0, 0.0006927167999999997, 0.009284716799999999),
    '1f1b_m16_p2_cpu_shared': (0.006276042752000004, 0.0053088000000000015, 0.0004209210880000005, 2.763264e-06, 0.0005435584000000018, 4550656.0, 0.0005435584000000018, 0.006172358400000004),
    '1f1b_m16_p2_measured': (0.06274986355199999, 0.054400000000000004, 0.00042092108799999216, 2.763264e-06, 0.007926179199999994, 4550656.0, 0.007926179199999994, 0.06264617919999999),
    '1f1b_p4_dp2_dgx': (0.002931594383283582, 0.0013599999999999997, 6.309866135987066e-06, 8.248549253731343e-07, 0.0015644596622222222, 2409472.0, 0.0015644596622222222, 0.0029244596622222223),
    '1f1b_p4_scaled': (0.0003253935573333333, 0.000173752, 1.3816320000000013e-06, 1.381632e-06, 0.00014887829333333328, 3426304.0, 0.00014887829333333328, 0.0003226302933333333),
    '1f1b_p4_dp2_measured_dgx': (0.02603404131873964, 0.014, 8.579308258706633e-06, 8.248549253731344e-07, 0.01202463715555556, 3694592.0, 0.01202463715555556, 0.026024637155555558),
    '1f1b_p4_stage_costs': (33.0, 24.0, 0.0, 0.0, 9.0, 0.0, 9.0, 33.0),
}


@pytest.mark.parametrize("case", cases(), ids=[c[0] for c in cases()])
def test_plan_pricing_gives_the_recorded_figures(case):
    cid, prof, cluster, p, m, schedule, dp, batch, kwargs = case
    got = figures(price_pipeline.pipeline(prof, cluster, p, m, schedule, dp, batch, **kwargs))
    want = EXPECTED[cid]
    assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(got, want)), (got, want)


def test_pricing_reads_the_plans_bytes_and_sync():
    """The priced step follows the plan's ops: the boundary's bytes on a slow link, the batch axis's
    gradient buckets."""
    prof = synthetic_profile(layers=4)
    slow = gpu_cluster(bandwidth=1e8)
    plan = price_pipeline.pipeline_plan(prof, 2, 4, "1f1b", 2, 256, stage_starts=[2])
    step, *_ = price_pipeline.price_pipeline(plan, prof, slow)
    sends = [t for t in step.timeline.tasks if t.name.startswith("act 0->1")]
    boundary = [op for op in plan.ops(0) if op["kind"] == "send"]
    assert len(sends) == len(boundary) == 4
    for task, op in zip(sends, boundary):
        assert op["bytes"] == 32 * prof.layers[1].activation_values * 4
        assert task.duration == pytest.approx(slow.intra_host.time(op["bytes"]))
    reduces = [t for t in step.timeline.tasks if t.name.endswith("gradient all-reduce")]
    assert len(reduces) == 2  # one bucket per stage, over the 2 pipelines
    one = price_pipeline.pipeline_plan(prof, 2, 4, "1f1b", 1, 128, stage_starts=[2])
    single, *_ = price_pipeline.price_pipeline(one, prof, slow)
    assert not [t for t in single.timeline.tasks if t.name.endswith("gradient all-reduce")]


def _recurrent_stack(layers=4, timesteps=16):
    import mdtrain as tf
    tf.keras.utils.set_random_seed(3)
    L = tf.keras.layers
    model = tf.keras.Sequential([tf.keras.Input((timesteps, 3))] +
                                [L.LSTM(8, return_sequences=True, name=f"r{i}") for i in range(layers)] +
                                [L.Dense(2, name="head")])
    model.compile(optimizer="adam", loss="mse")
    return model


def test_wavefront_pricing_spends_each_stages_layers_once_over_its_chunks():
    from mdtrain.plan.profile import profile_model
    model = _recurrent_stack()
    prof = profile_model(model, rows=(8,), repeats=1, threads=1, step_costs=False, shared=False, in_flight=False)
    cluster = cpu_cluster(4, cores=4)
    plan = price_pipeline.wavefront_plan(model, 2, 4, 8)
    assert [s["name"] for s in plan.segments] == ["stage0", "stage1", "head"]
    step = price_pipeline.price_wavefront(plan, prof, cluster, 16)
    for d, seg in enumerate(plan.segments[:2]):
        busy = sum(t.duration for t in step.timeline.tasks if t.name.startswith(f"stage{d} ") and
                   (" F" in t.name or " B" in t.name) and not t.name.startswith(f"stage{d} F2") and
                   not t.name.startswith(f"stage{d} B2"))
        layers = prof.layers[seg["first_layer"]:seg["end_layer"]]
        assert busy == pytest.approx(sum(x.time(8) for x in layers), rel=1e-9)
    assert step.step_time_s > max(x.time(8) for x in prof.layers)
    with pytest.raises(ValueError, match="recurrent"):
        price_pipeline.wavefront_plan(model, 8, 4, 8)  # more stages than recurrent layers


def test_planner_considers_the_wavefront_for_recurrent_models():
    from mdtrain.plan import plan
    from mdtrain.plan.profile import profile_model, profile_rows
    model = _recurrent_stack()
    prof = profile_model(model, rows=profile_rows(32), repeats=1, threads=1, step_costs=False, shared=False,
                         in_flight=False)
    cluster = cpu_cluster(4, cores=4)
    plans = plan(model, 32, cluster, profile=prof, this_machine_flops=cluster.peak_flops)
    waves = [p for p in plans if p.strategy_name == "WavefrontPipeline"]
    applicable = [p for p in waves if p.applicable]
    assert {p.settings["stages"] for p in applicable} == {2, 4}
    assert all(p.step_time_s > 0 for p in applicable)
    assert {p.settings["time_chunk"] for p in applicable} == {8, 4, 2, 1}
    # A model that is not a recurrent sequence stack gets no wavefront plans.
    import mdtrain as tf
    mlp = tf.keras.Sequential([tf.keras.Input((20,)), tf.keras.layers.Dense(4)])
    mlp.compile(optimizer="adam", loss="mse")
    others = plan(mlp, 32, cluster, profile=synthetic_profile(layers=1), this_machine_flops=cluster.peak_flops)
    assert not [p for p in others if p.strategy_name == "WavefrontPipeline"]
