"""One ``TargetRuntime`` pass at the shapes a server steps through: rows × cached columns × new tokens a row.

Why: a change to the runtime (attention, linears, threads) moves these passes differently by shape — a one-token
step over a long cache is mostly attention, a 17-token verify pass mostly the linears — so a change is judged on
all of them at once, against the commit before it: run this file from each checkout in turn (``PYTHONPATH`` the
other checkout's ``src``), alternating, with nothing else running. The OpenMP wait is the server's (no spin: passes
of up to 2 rows and 36 tokens run on one thread, ``runtime/threads.py``) unless ``--bench`` asks for bench's.

    python benchmarks/runtime_step.py
    PYTHONPATH=../old/src python benchmarks/runtime_step.py       # the same from another checkout
    python benchmarks/runtime_step.py --shapes 1:120:1 1:600:1 16:1000:1 --reps 20
"""

# ruff: noqa: E402  (the OpenMP choice must come before torch loads)
from __future__ import annotations

import sys

from lilicorr.cli.openmp import openmp_spin

openmp_spin("bench" if "--bench" in sys.argv else "serve")

import argparse
import json
import statistics
import time

import torch

import lilicorr
from lilicorr.runtime.runtime import TargetRuntime

SHAPES = ("1:120:1", "1:600:1", "2:300:1", "8:200:1", "32:200:1", "1:200:9", "1:200:17")


def pass_ms(rt: TargetRuntime, rows: int, cols: int, new: int, reps: int, gen: torch.Generator) -> float:
    """Median ms of a pass of ``new`` tokens a row after ``cols`` cached ones (the cache cut back after each)."""
    state = rt.new_state(rows)
    with torch.inference_mode():
        rt.forward(state, torch.randint(0, rt.vocab_size, (rows, cols), generator=gen), want_taps=False)
        keep = state.lengths.clone()
        tokens = torch.randint(0, rt.vocab_size, (rows, new), generator=gen)  # [rows, new]
        times = []
        for _ in range(reps + 3):
            t0 = time.perf_counter()
            rt.forward(state, tokens, want_taps=False)
            times.append(time.perf_counter() - t0)
            rt.truncate(state, keep)
    return 1e3 * statistics.median(times[3:])  # the first passes warm the cache's buffers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), help="rows:cached_columns:new_tokens")
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--bench", action="store_true", help="bench's OpenMP spin instead of the server's")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rt = TargetRuntime.load(args.target, dtype=getattr(torch, args.dtype))
    gen = torch.Generator().manual_seed(0)
    out = {}
    for shape in args.shapes:
        try:
            rows, cols, new = (int(x) for x in shape.split(":"))
        except ValueError as e:
            raise SystemExit(f"--shapes {shape!r}: expected rows:cached_columns:new_tokens, three integers") from e
        out[shape] = round(pass_ms(rt, rows, cols, new, args.reps, gen), 2)
    if args.json:
        print(json.dumps({"lilicorr": lilicorr.__file__, "dtype": args.dtype, "ms": out}))
    else:
        print(f"{lilicorr.__file__} ({args.dtype}): " + " | ".join(f"{k} {v:.1f} ms" for k, v in out.items()))


if __name__ == "__main__":
    main()
