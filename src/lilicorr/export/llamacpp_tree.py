"""The pinned llama.cpp tree with this repository's patches applied (``make llamacpp``).

Why a record of what was applied: ``build/llama.cpp/src`` is unpacked once and then patched in place, so
when a patch changes, the old one is reversed first (touching exactly the files it touched, so the
incremental build recompiles them) and the new one applied. ``src.patches`` holds the applied text; a tree
that no longer reverses cleanly is unpacked afresh and its build folder dropped (unpacked files keep the
sdist's old timestamps, which an incremental build would not notice).

``python -m lilicorr.export.llamacpp_tree`` prints the tree and the patch set's hash (the build stamp's).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from lilicorr.export.gguf import source_dir, tree_root

PATCH_DIR = Path("patches/llama.cpp")


def patch_set(patch_dir: Path = PATCH_DIR) -> str:
    """The patches to apply, concatenated in file-name order ('' when there are none)."""
    return "".join(p.read_text() for p in sorted(patch_dir.glob("*.patch")))


def patch_hash(patch_dir: Path = PATCH_DIR) -> str:
    return hashlib.sha256(patch_set(patch_dir).encode()).hexdigest()[:16]


def _patch(tree: Path, text: str, *args: str) -> subprocess.CompletedProcess:
    cmd = ["patch", "-p1", "--batch", "--silent", "--no-backup-if-mismatch", "-d", str(tree), *args]
    return subprocess.run(cmd, input=text, capture_output=True, text=True)


def patched_source_dir(root: Path | None = None, patch_dir: Path = PATCH_DIR) -> Path:
    """``source_dir()`` with the patch set applied; idempotent (default root: ``tree_root()``)."""
    root = root if root is not None else tree_root()
    tree = source_dir(root)
    record = root / "src.patches"
    want = patch_set(patch_dir)
    have = record.read_text() if record.exists() else ""
    if have == want:
        return tree
    if have and _patch(tree, have, "--reverse", "--dry-run").returncode == 0:
        _patch(tree, have, "--reverse").check_returncode()
    elif have:  # the tree was edited by hand: start from a fresh unpack and a fresh build
        (root / "src.pin").unlink(missing_ok=True)
        shutil.rmtree(root / "cmake", ignore_errors=True)
        tree = source_dir(root)
    record.unlink(missing_ok=True)
    if want:
        dry = _patch(tree, want, "--forward", "--dry-run")
        if dry.returncode != 0:
            raise RuntimeError(f"{patch_dir}: does not apply to {tree}:\n{(dry.stdout + dry.stderr)[-1500:]}")
        _patch(tree, want, "--forward").check_returncode()
        record.write_text(want)
    return tree


if __name__ == "__main__":
    print(patched_source_dir(), patch_hash())
