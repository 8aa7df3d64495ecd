"""The documents stay navigable: every relative link in the README, CONTRIBUTING and docs/ resolves, every
document a comment in the code names by path exists, the results index is current, and the README and
docs/results keep their size (docs/archive/ takes what is superseded)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")  # inline links and images
REF = re.compile(r"^\[[^\]]+\]:\s+(\S+)", re.M)  # reference-style link definitions
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:")  # http:, https:, mailto:
CITED = re.compile(r"(?<![\w/.-])(docs/[\w./-]+?\.(?:md|png))(?![\w*])")  # a path written in code or a comment
CODE_DIRS = ("src", "tests", "scripts", "benchmarks")


def _documents() -> list[Path]:
    top = [p for p in (ROOT / "README.md", ROOT / "CONTRIBUTING.md") if p.exists()]
    return top + sorted((ROOT / "docs").rglob("*.md"))


def _links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) + REF.findall(text) if not EXTERNAL.match(t) and not t.startswith("#")]


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    broken = [t for t in _links(doc) if not (doc.parent / t.partition("#")[0]).exists()]
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"


def test_cited_documents_exist():
    """A ``docs/…/X.md`` (or ``.png``) named in src/, tests/, scripts/ or benchmarks/ exists (globs are skipped)."""
    missing = []
    for d in CODE_DIRS:
        for f in sorted((ROOT / d).rglob("*")):
            if f.suffix not in (".py", ".sh") or any(part.endswith(".egg-info") for part in f.parts):
                continue
            for ref in CITED.findall(f.read_text(encoding="utf-8")):
                if not (ROOT / ref).exists():
                    missing.append(f"{f.relative_to(ROOT)}: {ref}")
    assert not missing, missing


def test_results_index_is_current():
    """docs/results/README.md is what ``python benchmarks/results_index.py`` writes from the pages."""
    spec = importlib.util.spec_from_file_location("results_index", ROOT / "benchmarks" / "results_index.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    current = (RESULTS / "README.md").read_text(encoding="utf-8")
    assert current == mod.render(RESULTS), "stale: run python benchmarks/results_index.py"


def test_readme_and_results_keep_their_size():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines (at most 120)"
    wide = [i + 1 for i, line in enumerate(lines) if len(line) > 120]
    assert not wide, f"README.md lines over 120 characters: {wide}"
    top = sorted(p.name for p in RESULTS.iterdir())
    assert len(top) <= 40, f"docs/results holds {len(top)} entries at its top level (at most 40): move to docs/archive/"
    assert all(p.is_file() for p in RESULTS.iterdir()), "raw logs and JSON belong in docs/archive/"
