"""``lilicorr`` command line: one module per command group, each a thin adapter over the library.

Modules import their heavy dependencies inside the handlers, so ``lilicorr --help`` is instant and a
command fails with a clear message about its own inputs instead of an unrelated import error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

# OpenMP's wait between parallel regions, for the commands that decode (measured by
# benchmarks/openmp_spin.py, docs/results/openmp-spin.md). PASSIVE alone puts torch's second thread to sleep
# after every operator, and waking it costs more than a one-token step's hundreds of tiny operators are worth:
# on an idle 2-core machine a bounded spin (GOMP_SPINCOUNT) makes a SmolLM2 step 1.7–2.2× faster, beside niced
# background jobs 1.3–1.4×; spinning makes it 2.2–2.3× slower when another process competes for the cores at normal
# priority, so it is chosen only when no such process is running. `auto` decides once, at start: right for the
# short-lived `generate` and `bench`; a server lives on while load generators and other jobs come and go
# beside it, so `serve` spins only when asked (LILICORR_OMP_SPIN=N).
DECODING_COMMANDS = frozenset({"generate", "serve", "bench"})
AUTO_SPIN_COMMANDS = frozenset({"generate", "bench"})
IDLE_SPIN_COUNT = 10000


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
    spin count. A ``GOMP_SPINCOUNT`` the user set is kept;
    once torch is imported the runtime has read its environment, so nothing is changed then.
    """
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
    return str(count)


def _env(args: argparse.Namespace) -> int:
    """This machine as far as a figure depends on it: versions, threads, CPU and its bf16 support."""
    import platform

    import torch
    import transformers

    from lilicorr.runtime.runtime import cpu_has_fast_bf16

    lines = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    cpu = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), [])
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "bf16_flags": sorted(f for f in flags if "bf16" in f or f.startswith("amx")),
        "fast_bf16": cpu_has_fast_bf16(),
        "cuda": torch.cuda.is_available(),
    }
    print(json.dumps(info, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from lilicorr.cli import bench, data, export, generate, inspect, serve, target, train

    p = argparse.ArgumentParser(prog="lilicorr", description="LiLiCorr speculative decoding toolkit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    s = sub.add_parser("env", help="print this machine's versions, threads and CPU (quote it beside any figure)")
    s.set_defaults(func=_env)
    for module in (data, target, train, serve, bench, export, inspect, generate):
        module.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    # before the parser: registering the commands' options imports torch, and OpenMP reads its environment then
    openmp_spin(next((w for w in words if not w.startswith("-")), ""))
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
