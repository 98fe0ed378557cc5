"""bench/plan_accuracy.py's pass rule (issue 35 point 4) and its record: a row's prediction (the
median of its rounds') passes within 20 % of the median fit or inside the fits' min-max range;
each run is added to bench/results/plan_accuracy.json in the format bench/results_md.py renders."""
import importlib.util
import json
import pathlib
import sys
from types import SimpleNamespace

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def _load(name):
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def bench():
    return _load("plan_accuracy")


def _row(bench, predicted_ms, fits_ms):
    predictions = [SimpleNamespace(step_time_s=p / 1e3, breakdown={"compute": p / 1e3}, why="") for p in predicted_ms]
    fits = [{"step": f / 1e3, "steal": 0.0, "compute": f / 1e3} for f in fits_ms]
    return bench.judge("seed", "case", "none", predictions, fits, [0.0] * len(fits))


def test_within_20_percent_of_the_median_fit_passes(bench):
    row = _row(bench, [1.15, 1.19, 5.0], [1.0, 1.0, 1.01])
    assert row["predicted_ms"] == pytest.approx(1.19)  # the median prediction, not the fastest
    assert row["measured_median_ms"] == pytest.approx(1.0)
    assert row["error"] == pytest.approx(0.19) and row["passes"]
    assert row["first_prediction_passes"]


def test_inside_the_fits_range_passes_beyond_20_percent(bench):
    row = _row(bench, [1.4, 1.4, 1.4], [1.0, 1.1, 1.5])
    assert row["error"] == pytest.approx(1.4 / 1.1 - 1) and row["error"] > 0.2
    assert row["fit_spread"] == pytest.approx(0.5 / 1.1)
    assert row["passes"]


def test_outside_both_fails(bench):
    row = _row(bench, [0.7, 0.7, 0.7], [1.0, 1.1, 1.2])
    assert row["error"] < -0.2 and not row["passes"] and not row["first_prediction_passes"]


def test_runs_are_kept_in_the_rendered_record_format(tmp_path):
    common = _load("_common")
    results_md = _load("results_md")
    path = tmp_path / "plan_accuracy.json"
    for i in range(5):
        common.append_run(str(path), "plan_accuracy", "python bench/plan_accuracy.py", "what",
                          {"conditions": f"run {i}", "figures": [f"{i} of 48 rows pass"],
                           "tables": [{"title": "t", "columns": ["a"], "rows": [[str(i)]]}]}, keep=4)
    record = json.loads(path.read_text())
    assert [r["conditions"] for r in record["runs"]] == ["run 1", "run 2", "run 3", "run 4"]
    assert all(r["machine"] and r["date"] for r in record["runs"])
    page = results_md.render([("plan_accuracy.json", record)])
    assert "- 4 of 48 rows pass" in page and page.count("Machine A") == 4
