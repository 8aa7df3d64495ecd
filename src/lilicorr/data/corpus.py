"""Offline training corpus: CPython standard library (code) + Debian's Python and Perl docs (prose).

No model hub or dataset hub is reachable, so the project builds its corpus from sources every
machine of its kind can get: the interpreter's own standard library and two Debian documentation
packages fetched with ``apt-get download``. Documents are split by a stable hash of their name so
that the split never depends on file-system order, and a manifest records sizes and sha256 of each
split so a model card can name exactly which data it saw.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lilicorr.data.atomic import atomic_write_text

SPLITS = ("train", "validation", "test")
CATEGORIES = ("code", "prose")
DEB_PACKAGES = ("python3.11-doc", "perl-doc")
# Percent of documents per split, by hash bucket: [0, 90) train, [90, 95) validation, [95, 100) test.
_SPLIT_BOUNDS = (90, 95)
_EXCLUDED_STDLIB_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__", "dist-packages"}


class CorpusError(RuntimeError):
    """The corpus cannot be built or read; the message names the missing piece."""


@dataclass(frozen=True)
class Document:
    """One corpus document: ``id`` is stable across machines (used for splitting)."""

    id: str
    category: str
    text: str


def split_of(doc_id: str) -> str:
    """Stable split assignment from the sha256 of the document id."""
    bucket = int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "big") % 100
    if bucket < _SPLIT_BOUNDS[0]:
        return "train"
    if bucket < _SPLIT_BOUNDS[1]:
        return "validation"
    return "test"


def _is_test_path(rel: Path) -> bool:
    if any(part in _EXCLUDED_STDLIB_DIRS for part in rel.parts[:-1]):
        return True
    return rel.name.startswith("test_") or rel.name == "conftest.py"


def iter_stdlib_code(stdlib: Path) -> Iterator[Document]:
    """All ``.py`` files of the standard library, tests excluded, in sorted order."""
    for path in sorted(stdlib.rglob("*.py")):
        rel = path.relative_to(stdlib)
        if _is_test_path(rel):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            yield Document(id=f"code/stdlib/{rel.as_posix()}", category="code", text=text)


def fetch_debs(workdir: Path) -> dict[str, str]:
    """Download and unpack the documentation packages; returns {package: version}."""
    debs = workdir / "debs"
    extract = workdir / "extract"
    debs.mkdir(parents=True, exist_ok=True)
    have = {p.name.split("_")[0]: p for p in debs.glob("*.deb")}
    missing = [p for p in DEB_PACKAGES if p not in have]
    if missing:
        if shutil.which("apt-get") is None:
            raise CorpusError(f"apt-get not found: cannot fetch {missing} (Debian packages for the prose corpus)")
        subprocess.run(["apt-get", "update", "-qq"], check=False, capture_output=True)
        res = subprocess.run(["apt-get", "download", *missing], cwd=debs, capture_output=True, text=True)
        if res.returncode != 0:
            raise CorpusError(f"apt-get download {' '.join(missing)} failed: {res.stderr.strip()[-500:]}")
        have = {p.name.split("_")[0]: p for p in debs.glob("*.deb")}
    versions = {}
    for pkg in DEB_PACKAGES:
        deb = have[pkg]
        versions[pkg] = deb.name.split("_")[1]
        marker = extract / f".{pkg}.done"
        if not marker.exists():
            subprocess.run(["dpkg-deb", "-x", str(deb), str(extract)], check=True)
            marker.write_text(versions[pkg])
    return versions


def iter_prose(extract: Path) -> Iterator[Document]:
    """Python reST doc sources and Perl pod pages, in sorted order."""
    py_src = extract / "usr/share/doc/python3.11/html/_sources"
    for path in sorted(py_src.rglob("*.rst.txt")):
        rel = path.relative_to(py_src).as_posix()
        yield Document(id=f"prose/python-doc/{rel}", category="prose", text=path.read_text(errors="replace"))
    for path in sorted((extract / "usr/share/perl").rglob("*.pod")):
        rel = path.relative_to(extract / "usr/share/perl").as_posix()
        yield Document(id=f"prose/perl-doc/{rel}", category="prose", text=path.read_text(errors="replace"))


def build_corpus(out: Path, stdlib: Path | None = None) -> dict:
    """Build ``out/{train,validation,test}.jsonl`` and ``out/manifest.json``; returns the manifest.

    Deterministic for a given Python version and package versions (both recorded in the manifest).
    Each split file is written atomically, so an interrupted build never leaves a half file.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stdlib = Path(stdlib or sysconfig.get_paths()["stdlib"])
    versions = fetch_debs(out)
    docs: dict[str, list[Document]] = {s: [] for s in SPLITS}
    for doc in [*iter_stdlib_code(stdlib), *iter_prose(out / "extract")]:
        docs[split_of(doc.id)].append(doc)
    manifest: dict = {
        "sources": {"python_stdlib": platform.python_version(), **{p: v for p, v in versions.items()}},
        "split_rule": "sha256(id) first 8 bytes mod 100: <90 train, <95 validation, else test",
        "splits": {},
    }
    for split in SPLITS:
        lines = [json.dumps({"id": d.id, "category": d.category, "text": d.text}) for d in docs[split]]
        body = "".join(line + "\n" for line in lines)
        atomic_write_text(out / f"{split}.jsonl", body)
        manifest["splits"][split] = {
            "files": len(lines),
            "files_per_category": {c: sum(d.category == c for d in docs[split]) for c in CATEGORIES},
            "bytes": len(body.encode()),
            "sha256": hashlib.sha256(body.encode()).hexdigest(),
        }
    manifest["hash"] = hashlib.sha256(json.dumps(manifest["splits"], sort_keys=True).encode()).hexdigest()[:16]
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    return manifest


def default_corpus_dir() -> Path:
    """Cache location: ``$LILICORR_CORPUS`` or ``data/corpus`` under the current directory."""
    return Path(os.environ.get("LILICORR_CORPUS", "data/corpus"))


def ensure_corpus(out: Path | None = None) -> Path:
    """Return a built corpus directory, building it on first use."""
    out = Path(out or default_corpus_dir())
    if not (out / "manifest.json").exists():
        build_corpus(out)
    return out


def load_manifest(corpus: Path) -> dict:
    path = Path(corpus) / "manifest.json"
    if not path.exists():
        raise CorpusError(f"{path} not found: build the corpus with `lilicorr data corpus --out {corpus}`")
    return json.loads(path.read_text())


def read_split(corpus: Path, split: str, category: str | None = None) -> list[Document]:
    """Documents of one split (optionally one category), in file order."""
    if split not in SPLITS:
        raise CorpusError(f"unknown split {split!r}: expected one of {SPLITS}")
    path = Path(corpus) / f"{split}.jsonl"
    if not path.exists():
        raise CorpusError(f"{path} not found: build the corpus with `lilicorr data corpus --out {corpus}`")
    docs = []
    with path.open() as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            if category is None or rec["category"] == category:
                docs.append(Document(rec["id"], rec["category"], rec["text"]))
    return docs
