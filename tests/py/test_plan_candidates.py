"""The planner runs every strategy family of mdtrain.plan.candidates (one module each, ordered by
RANK), so a strategy added later appears in plan() as a module there, with no change to the
planner; every family the library has is among them."""
import sys

import pytest

from mdtrain.plan import candidates, plan
from test_plan import gpu_cluster, seed_mlp, synthetic_profile

FAMILY = '''
from mdtrain.plan import price_plan

RANK = 35


def candidates(ctx):
    step = price_plan.replicated_plan(ctx.prof, "MirroredStrategy", 2, host_replicas=False,
                                      clips_by_norm=ctx.clips)
    ctx.add("ExampleStrategy", 2, {"example": True}, price_plan.price(step, ctx.prof, ctx.cluster, ctx.b,
                                                                       scale=ctx.scale), "an added family")
'''


def test_every_strategy_family_is_planned():
    names = [m.__name__.rsplit(".", 1)[1] for m in candidates.families()]
    assert names == ["data_parallel", "central_storage", "parameter_servers", "model_parallel", "pipeline",
                     "wavefront"]
    plans = plan(seed_mlp(), 64, gpu_cluster(hosts=1), profile=synthetic_profile(layers=4), this_machine_flops=1e12)
    assert {p.strategy_name for p in plans} >= {"OneDeviceStrategy", "MirroredStrategy", "CentralStorageStrategy",
                                                "ParameterServerStrategy", "ModelParallel", "PipelineParallel"}


def test_a_family_module_added_later_is_planned_without_planner_code(tmp_path, monkeypatch):
    package = tmp_path / "extra"
    package.mkdir()
    (package / "example_family.py").write_text(FAMILY)
    monkeypatch.setattr(candidates, "__path__", list(candidates.__path__) + [str(package)])
    monkeypatch.delitem(sys.modules, "mdtrain.plan.candidates.example_family", raising=False)
    names = [m.__name__.rsplit(".", 1)[1] for m in candidates.families()]
    assert names.index("example_family") == names.index("parameter_servers") + 1  # RANK 35
    plans = plan(seed_mlp(), 64, gpu_cluster(hosts=1), profile=synthetic_profile(layers=4), this_machine_flops=1e12)
    added = [p for p in plans if p.strategy_name == "ExampleStrategy"]
    assert len(added) == 1 and added[0].applicable and added[0].step_time_s > 0
    assert added[0].settings == {"example": True}
    mirrored = [p for p in plans if p.strategy_name == "MirroredStrategy" and p.num_devices == 2]
    assert any(p.step_time_s == pytest.approx(added[0].step_time_s) for p in mirrored)
