"""Finished pieces of a bench run, kept on disk so that an interrupted run resumes where it stopped.

A full bench is many arm × temperature runs plus a sweep; on a small machine that is an hour or more,
and sessions end abruptly. Each finished piece is written atomically under ``OUT/parts/`` with a
fingerprint of everything that determines it (target, drafts and their weights' mtimes, prompts,
token budget, seed); a rerun with the same fingerprint reuses it, any change recomputes it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from lilicorr.data.atomic import atomic_write_text


def weights_id(folder: str | None) -> list:
    """A checkpoint folder's identity for caching: path plus size and mtime of its weight files."""
    if not folder:
        return []
    files = sorted(Path(folder).glob("*.safetensors"))
    return [folder, [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files]]


def fingerprint(
    target: str, prompts: list[dict], max_tokens: int, seed: int, dtype: str = "float32", spin: str | None = None
) -> str:
    """Hash of the inputs every piece depends on; each piece's key adds its own drafter's ``weights_id``,
    so adding a drafter to a finished bench reruns only that drafter's arms. ``spin``: the process's
    ``GOMP_SPINCOUNT`` — timings measured with and without OpenMP's spin must not be mixed on one page."""
    blob = json.dumps(
        {"target": weights_id(target), "prompts": prompts, "max_tokens": max_tokens, "seed": seed}
        | ({"dtype": dtype} if dtype != "float32" else {})  # fp32 keys unchanged: earlier parts still resume
        | ({"gomp_spincount": spin} if spin not in (None, "0") else {}),  # so are passive ones
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class PartCache:
    """``get``/``put`` JSON pieces by key; a no-op when ``out`` is None."""

    def __init__(self, out: Path | None, fp: str):
        self.dir = Path(out) / "parts" if out is not None else None
        self.fp = fp
        self.reused: list[str] = []

    def _path(self, key: str) -> Path:
        safe = hashlib.sha256(key.encode()).hexdigest()[:20]
        return self.dir / f"{safe}.json"

    def get(self, key: str):
        if self.dir is None or not self._path(key).exists():
            return None
        try:
            part = json.loads(self._path(key).read_text())
        except (OSError, json.JSONDecodeError):
            return None  # unreadable: recompute rather than fail
        if part.get("fingerprint") != self.fp or part.get("key") != key:
            return None
        self.reused.append(key)
        return part["value"]

    def put(self, key: str, value) -> None:
        if self.dir is not None:
            atomic_write_text(self._path(key), json.dumps({"fingerprint": self.fp, "key": key, "value": value}) + "\n")
