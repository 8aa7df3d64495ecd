"""Atomic file writes: a crash or a bad input never leaves a half-written output behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)`` then rename onto ``path`` (same directory, so the rename is atomic). The file
    gets the permissions a plain ``open`` would give it (mkstemp's are owner-only: a server or a colleague
    running as another user could not read a checkpoint or data file written this way)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def plain_permissions(folder: Path) -> None:
    """What ``mkdir`` and ``open`` would have given: mkdtemp makes the folder owner-only, and some writers (the
    safetensors writer among them) create owner-only files — a server running as another user could not read the
    checkpoint."""
    mask = _umask()
    os.chmod(folder, 0o777 & ~mask)
    for p in folder.rglob("*"):
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~mask)


def atomic_write_dir(path: Path, write: Callable[[Path], None]) -> None:
    """Build a directory with ``write(tmp_dir)`` beside ``path``, then swap it into place.

    Readers see either the old folder or the complete new one, never a half-written checkpoint.
    """
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        write(tmp)
        plain_permissions(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
