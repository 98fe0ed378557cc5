"""The C++ layering is checked: every #include "mdtrain/..." under cpp/mdtrain follows the rules
written once in docs/design.md ("Layering rules"). Reads the sources; needs no build."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = ROOT / "cpp" / "mdtrain"
DESIGN = ROOT / "docs" / "design.md"
MARKER = "<!-- layering rules"
SUFFIXES = {".h", ".cpp", ".cu", ".cuh", ".inl"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"mdtrain/(?P<path>[^"]+)"')


class Rule:
    def __init__(self, source, target, to_fix, line):
        self.source, self.target, self.to_fix, self.line = source, target, to_fix, line


def read_rules(text):
    """The arrows in the fenced block after MARKER: "folder -> a, b  # comment" per line."""
    if MARKER not in text:
        raise AssertionError(f"{DESIGN.relative_to(ROOT)} has no '{MARKER}' block")
    lines = text[text.index(MARKER):].splitlines()
    fence = next(i for i, line in enumerate(lines) if line.startswith("```"))
    rules = []
    for n, line in enumerate(lines[fence + 1:], start=1):
        if line.startswith("```"):
            break
        body, _, comment = line.partition("#")
        if not body.strip():
            continue
        source, arrow, targets = body.partition("->")
        if not arrow or not source.strip():
            raise AssertionError(f"layering rules: cannot read line {n} of the block: {line!r}")
        for target in targets.split(","):
            if target.strip():
                rules.append(Rule(source.strip(), target.strip(), "to fix" in comment, line.strip()))
    return rules


def folders():
    return sorted(str(p.relative_to(SOURCES)) for p in SOURCES.rglob("*") if p.is_dir())


def includes():
    """(file relative to the repository, line number, including folder, included folder, text)."""
    out = []
    for path in sorted(SOURCES.rglob("*")):
        if path.suffix not in SUFFIXES or not path.is_file():
            continue
        source = str(path.parent.relative_to(SOURCES))
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            m = INCLUDE.match(line)
            if m:
                target = str(pathlib.PurePosixPath(m.group("path")).parent)
                out.append((str(path.relative_to(ROOT)), number, source, target, line.strip()))
    return out


def violations(rules, found):
    allowed = {}
    for r in rules:
        allowed.setdefault(r.source, set()).add(r.target)
    out = []
    for file, number, source, target, text in found:
        if target != source and target not in allowed.get(source, set()):
            may = ", ".join(sorted(allowed.get(source, ()))) or "nothing"
            out.append(f"{file}:{number}: {source} -> {target} is forbidden ({text}); {source} may include: {may}")
    return out


@pytest.fixture(scope="module")
def rules():
    return read_rules(DESIGN.read_text())


def test_every_include_follows_the_rules(rules):
    found = includes()
    assert len(found) > 100, "found too few includes: is SOURCES right?"
    bad = violations(rules, found)
    assert not bad, "forbidden includes (rules in docs/design.md, 'Layering rules'):\n" + "\n".join(bad)


def test_every_folder_has_rules_and_every_rule_names_folders(rules):
    existing = set(folders())
    named = {r.source for r in rules}
    assert sorted(existing - named) == [], "folders under cpp/mdtrain without layering rules in docs/design.md"
    unknown = sorted({f"{r.source} -> {r.target}" for r in rules
                      if r.source not in existing or r.target not in existing})
    assert unknown == [], "layering rules naming folders that do not exist under cpp/mdtrain"


def test_to_fix_allowances_are_still_needed(rules):
    used = {(source, target) for _, _, source, target, _ in includes()}
    stale = [r.line for r in rules if r.to_fix and (r.source, r.target) not in used]
    assert stale == [], "'to fix' arrows no longer in the code: delete them from docs/design.md"


def test_strategy_never_includes_model(rules):
    # The strategy layer takes over code from model/ (DESIGN.md §8): the arrow must stay model -> strategy.
    assert ("strategy", "model") not in {(r.source, r.target) for r in rules}
    assert ("model", "strategy") in {(r.source, r.target) for r in rules}


def test_a_forbidden_include_is_reported_with_file_line_and_arrow(rules):
    # The checker itself, on a made-up include list: layers must never see a strategy.
    found = [("cpp/mdtrain/nn/dense.cpp", 7, "nn", "strategy", '#include "mdtrain/strategy/strategy.h"'),
             ("cpp/mdtrain/nn/dense.cpp", 8, "nn", "ops", '#include "mdtrain/ops/ops.h"')]
    bad = violations(rules, found)
    assert len(bad) == 1
    assert bad[0].startswith("cpp/mdtrain/nn/dense.cpp:7: nn -> strategy is forbidden")


def test_rules_parser_reads_comments_and_to_fix():
    text = f"""x\n{MARKER} -->\n```\na -> b, c   # why\n# a comment line\nd -> e  # to fix: later\n```\nz -> q\n"""
    parsed = [(r.source, r.target, r.to_fix) for r in read_rules(text)]
    assert parsed == [("a", "b", False), ("a", "c", False), ("d", "e", True)]
