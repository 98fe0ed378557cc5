"""The README and docs/ describe the product, not a run's history (docs/design.md; issue 35,
point 5): no dates, sessions or load averages there; measured figures live in bench/results/ and
the generated bench/RESULTS.md, which the docs link. Reads files only; needs no build."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
DIARY_PHRASES = ("this stop", "this session", "load average")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _name(path):
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_no_dates_sessions_or_load_averages(page):
    bad = []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if ISO_DATE.search(line):
            bad.append(f"{number}: date {ISO_DATE.search(line).group()}")
        bad += [f"{number}: {phrase!r}" for phrase in DIARY_PHRASES if phrase in line.lower()]
    assert not bad, f"{_name(page)} reads like a run diary (move figures to bench/results/):\n" + "\n".join(bad)


def test_the_checks_catch_a_diary_line():
    line = "Measured on 2026-11-25 at load average 3 (this session)"
    assert ISO_DATE.search(line) and all(p in line.lower() for p in ("load average", "this session"))


def test_readme_is_an_entry_point_with_the_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    assert "\nbash scripts/quickstart.sh\n" in text and "\nbash scripts/test.sh\n" in text
    assert (ROOT / "scripts" / "quickstart.sh").is_file() and (ROOT / "scripts" / "test.sh").is_file()
    assert max(len(line) for line in text.splitlines()) <= 200, "no results-sheet rows in the README"
    assert "MDTRAIN_JOB_SECRET" in text and "docs/parameter_server.md" in text


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_relative_links_point_at_files_that_exist(page):
    missing = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            missing.append(target)
    assert not missing, f"{_name(page)} links to missing files: {missing}"


def test_links_into_results_name_a_section_that_exists():
    results = (ROOT / "bench" / "RESULTS.md").read_text()
    sections = {line[3:].strip() for line in results.splitlines() if line.startswith("## ")}
    wanted = {m.group(1) for page in PAGES for m in re.finditer(r"RESULTS\.md#([\w-]+)", page.read_text())}
    assert wanted and not wanted - sections, sorted(wanted - sections)


def test_results_md_is_generated_from_the_recorded_json():
    # A bench run here replaces its recorded file until RESULTS.md is regenerated and both are
    # committed: then the page is compared with what is committed, not with local output.
    try:
        local = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--ignored", "--",
                                "bench/results"], capture_output=True, text=True).stdout
    except OSError:
        local = ""
    if local.strip():
        pytest.skip("bench/results has local bench output: python bench/results_md.py, then commit both")
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "results_md.py"), "--check"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
