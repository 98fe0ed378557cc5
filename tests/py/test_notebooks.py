"""The notebooks in notebooks/ run clean, top to bottom, in a fresh kernel (so they never rot).
They are committed without outputs; the runs here use smaller settings (fewer epochs, a part of
the data) through environment variables the notebooks read."""
import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat", reason="install the test extras: pip install '.[test]'")
nbclient = pytest.importorskip("nbclient", reason="install the test extras: pip install '.[test]'")

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_every_notebook_is_found_and_committed_without_outputs():
    assert [p.name for p in NOTEBOOKS] == ["01_quickstart_fashion_mnist.ipynb", "02_scaling.ipynb",
                                          "03_model_parallel.ipynb", "04_planning.ipynb"]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_clean(path, monkeypatch):
    monkeypatch.setenv("NOTEBOOK_EPOCHS", "2")
    monkeypatch.setenv("NOTEBOOK_SAMPLES", "20000")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError naming the cell on any error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, "the notebook's plots produced no images"
