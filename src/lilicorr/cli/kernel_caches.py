"""A bound on torch's CPU kernel caches for the commands that decode, set before torch loads.

torch on CPU keeps every oneDNN matmul it has built, keyed by shape, in two LRU caches: oneDNN's own primitive cache
(``ONEDNN_PRIMITIVE_CACHE_CAPACITY``) and ideep's (``LRU_CACHE_CAPACITY``), 1 024 entries each by default. Each entry
holds JIT-compiled kernels, a few hundred KB. A speculative server sees a new matmul shape for every distinct
(batch × tokens) count it runs — batch size, draft width and prompt length all vary — so at the defaults its
resident size keeps rising for many rounds: measured on SmolLM2-135M behind the load policy, 889 → 1 319 MiB from
round 1 to round 12 (+24 % after round 3), with no Python object growing (docs/results/smollm2-serving-notes.md).
The working set of one decode step is a few dozen entries (a handful of weight shapes × the step's few token counts),
so a bound of ``CACHE_ENTRIES`` keeps it whole: at 128 the same soak stays flat at the same round times, at 64 it
rebuilds kernels and loses ~6 % (same notes). Both variables are read once, at the first matmul, hence here.
"""

from __future__ import annotations

import os
import sys

CACHE_ENTRIES = 128
CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
BOUNDED_COMMANDS = frozenset({"generate", "serve", "bench"})


def bound_kernel_caches(command: str) -> dict[str, str | None]:
    """Give a decoding command's process ``CACHE_ENTRIES`` per kernel cache unless the user chose a size; return
    what is in force. After torch has loaded nothing is changed: the caches may already be sized. A value of 0 is
    refused by name for ``LRU_CACHE_CAPACITY`` because ideep crashes on it (measured: a segfault at the first
    matmul), where oneDNN reads 0 as "no cache"."""
    if os.environ.get("LRU_CACHE_CAPACITY", "").strip() == "0":
        raise SystemExit("LRU_CACHE_CAPACITY=0 crashes torch's ideep cache: use 1 or more (or unset it)")
    if "torch" not in sys.modules and command in BOUNDED_COMMANDS:
        for name in CACHE_VARIABLES:
            os.environ.setdefault(name, str(CACHE_ENTRIES))
    return {name: os.environ.get(name) for name in CACHE_VARIABLES}
