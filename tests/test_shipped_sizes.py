"""Every file committed under ``models/`` is at most 20 MB (``checkpoint/shards.py``: each version of a weight file
stays in git history; a drafter too large for one file ships as shards)."""

import subprocess
from pathlib import Path

import pytest

from lilicorr.checkpoint.shards import MAX_FILE_BYTES

ROOT = Path(__file__).resolve().parents[1]


def test_committed_model_files_fit_the_limit():
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "models"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = [ROOT / p for p in listed.stdout.decode().split("\0") if p]
    assert files, "no committed models"
    big = {
        str(f.relative_to(ROOT)): f.stat().st_size for f in files if f.exists() and f.stat().st_size > MAX_FILE_BYTES
    }
    assert not big, f"committed files over {MAX_FILE_BYTES} bytes: {big}"
