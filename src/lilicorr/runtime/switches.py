"""The runtime's on/off environment switches (``LILICORR_PACKED_LINEAR``, ``LILICORR_INT4``,
``LILICORR_STEP_THREADS``): one reading for all of them, so ``0``, ``false``, ``no`` and ``off`` turn any of them
off alike."""

from __future__ import annotations

import os

OFF = ("0", "false", "no", "off")


def switch_on(name: str) -> bool:
    """True unless the environment variable ``name`` says off (unset: on)."""
    return os.environ.get(name, "1").strip().lower() not in OFF
