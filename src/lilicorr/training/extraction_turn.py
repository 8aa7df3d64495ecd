"""One feature extraction at a time on a machine: campaigns that rebuild their caches take turns.

Why: on a fresh disk every campaign extracts its feature caches before its first step (hours on 2 cores), and two
campaigns extracting at once share the cores, so both finish late and neither trains for the whole of a 3-hour
session (session 46: Gemma's 48 shards and SmolLM2's 158 took the session's spare CPU). In turns, the first
campaign extracts at the machine's full speed and trains while the next one extracts: the same CPU, training hours
earlier. The turn is an exclusive ``flock`` on a file beside the caches (released by the kernel when its holder
dies, so a killed driver never blocks the next); the holder writes its campaign and pid there for ``train status``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_NAME = ".extraction.lock"


def lock_path(cache: str | Path) -> Path:
    """The turn's file: beside the caches (``data/cache/``), so every campaign of this checkout shares it."""
    return Path(cache).parent / LOCK_NAME


def holder(lock: Path) -> dict | None:
    """The campaign extracting now (``{"campaign", "pid"}``), None when none is, or its process is gone."""
    try:
        got = json.loads(lock.read_text() or "null")
    except (OSError, ValueError):
        return None
    if not isinstance(got, dict) or not isinstance(got.get("pid"), int):
        return None
    try:
        os.kill(got["pid"], 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, another user's
        pass
    return got


@contextlib.contextmanager
def extraction_turn(lock: Path, campaign: str) -> Iterator[dict]:
    """Wait for the turn, then hold it for the block; yields ``{"waited_s", "after"}`` (whose turn it waited for,
    None when it did not wait)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a+") as f:
        info: dict = {"waited_s": 0.0, "after": None}
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            before = holder(lock)
            info["after"] = before["campaign"] if before else "another extraction"
            t0 = time.time()
            fcntl.flock(f, fcntl.LOCK_EX)
            info["waited_s"] = round(time.time() - t0, 1)
        try:
            f.seek(0)
            f.truncate()
            f.write(json.dumps({"campaign": campaign, "pid": os.getpid()}))
            f.flush()
            yield info
        finally:
            f.seek(0)
            f.truncate()
            f.flush()
            fcntl.flock(f, fcntl.LOCK_UN)
