"""OpenMP's wait between parallel regions for the commands that decode, chosen before torch loads.

Measured by benchmarks/openmp_spin.py (docs/archive/smollm2-openmp-spin.md). ``OMP_WAIT_POLICY=PASSIVE`` alone puts
torch's second thread to sleep after every operator, and waking it costs more than a one-token step's
hundreds of tiny operators are worth. This module imports nothing heavy: it must run before torch does.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

# On an idle 2-core machine a bounded spin (GOMP_SPINCOUNT) makes a SmolLM2 step 1.7–2.2× faster, beside niced
# background jobs 1.3–1.4×; spinning makes it 2.2–2.3× slower when another process competes for the cores at normal
# priority, so it is chosen only when no such process is running. `auto` decides once, at start: right for the
# short-lived `generate` and `bench`; a server lives on while load generators and other jobs come and go
# beside it, so `serve` spins only when asked (LILICORR_OMP_SPIN=N).
DECODING_COMMANDS = frozenset({"generate", "serve", "bench"})
AUTO_SPIN_COMMANDS = frozenset({"generate", "bench"})
IDLE_SPIN_COUNT = 10000
CHOSEN_MARK = "LILICORR_GOMP_SPINCOUNT_CHOSEN"  # set beside a GOMP_SPINCOUNT that openmp_spin chose


def competing_cores(window_s: float = 0.1) -> float | None:
    """Cores kept busy by normal-priority work over ``window_s`` (/proc/stat: user + system + irq + softirq +
    steal; niced work is left out — it yields to us, and a spin beside it measured fine). None off Linux."""

    def sample() -> list[int] | None:
        try:
            fields = Path("/proc/stat").read_text().splitlines()[0].split()
        except OSError:
            return None
        return [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal

    a = sample()
    time.sleep(window_s)
    b = sample()
    if a is None or b is None or sum(b) == sum(a):
        return None
    d = [y - x for x, y in zip(a, b, strict=True)]
    busy = d[0] + d[2] + d[5] + d[6] + d[7]
    return busy / sum(d) * (os.cpu_count() or 1)


def openmp_spin(command: str) -> str | None:
    """Set ``GOMP_SPINCOUNT`` for a decoding command before torch loads OpenMP; return what is in force.

    ``LILICORR_OMP_SPIN``: ``auto`` (default: for ``AUTO_SPIN_COMMANDS``, ``IDLE_SPIN_COUNT`` when
    normal-priority work keeps less than half a core busy, else 0 — PASSIVE as before; 0 for ``serve``) or a
    spin count. A ``GOMP_SPINCOUNT`` the user set is kept; one a parent lilicorr command chose for itself (marked
    ``CHOSEN_MARK``: e.g. ``lilicorr bench serve`` starting its servers) is not the user's, so this command decides
    its own. Once torch is imported the runtime has read its environment, so nothing is changed then.
    """
    if "torch" not in sys.modules and os.environ.pop(CHOSEN_MARK, None) is not None:
        os.environ.pop("GOMP_SPINCOUNT", None)  # the parent's choice, for the parent's command
    if "GOMP_SPINCOUNT" in os.environ or "torch" in sys.modules or command not in DECODING_COMMANDS:
        return os.environ.get("GOMP_SPINCOUNT")
    choice = os.environ.get("LILICORR_OMP_SPIN", "auto")
    if choice == "auto" and command not in AUTO_SPIN_COMMANDS:
        count = 0
    elif choice == "auto":
        busy = competing_cores()
        count = IDLE_SPIN_COUNT if busy is not None and busy < 0.5 else 0
    elif choice.isdigit():
        count = int(choice)
    else:
        raise SystemExit(f"LILICORR_OMP_SPIN: expected 'auto' or a spin count (a whole number), got {choice!r}")
    os.environ["GOMP_SPINCOUNT"] = str(count)
    os.environ[CHOSEN_MARK] = "1"  # chosen here, not by the user: a child lilicorr command decides its own
    return str(count)
