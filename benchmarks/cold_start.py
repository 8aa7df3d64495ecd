"""A newcomer's `make run`, measured fairly: the default configuration with a fresh engine (a draft gate that
has measured nothing yet) against plain decoding, on the same prompt, alternating, in one process.

Why: `make run` times one 128-token request with a fresh gate and then AR once, so its printed speedup swings
by ±10 % on a shared 2-core machine, and what the gate spends finding out whether drafting pays is part of it.
Here each repetition builds a new default engine (as a new process would), the order of the two arms alternates,
and the speedup is total AR time over total speculative time.

Usage: python benchmarks/cold_start.py --target models/smollm2-135m-instruct --draft models/smollm2-lilicorr \
    --dtype float32 --reps 8
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from lilicorr.bench.runner import environment
from lilicorr.checkpoint import load_draft
from lilicorr.data.chat import row_ids
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import default_config, parse_speculative_config
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime

MAKE_RUN_PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a short docstring."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompt", default=MAKE_RUN_PROMPT, help="default: make run's prompt (under the chat template)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = resolve_dtype(args.dtype)
    target = TargetRuntime.load(args.target, dtype=dtype)
    draft = load_draft(args.draft, target.model.config, dtype=dtype)
    spec = parse_speculative_config(default_config(args.draft))
    ar = build_engine(target)
    ids = row_ids(target.tokenizer, {"prompt": args.prompt}, chat=True)
    seconds = {"ar": 0.0, "default": 0.0}
    paused, taus = [], []
    for rep in range(args.reps):
        fresh = build_engine(target, spec, draft, args.draft)  # a new process's engine: its gate knows nothing
        arms = [("ar", ar), ("default", fresh)]
        for name, engine in arms if rep % 2 else arms[::-1]:
            req = Request(
                list(ids), SamplingParams(max_tokens=args.max_new_tokens, ignore_eos=True), eos_ids=frozenset()
            )
            t0 = time.perf_counter()
            engine.generate([req])
            seconds[name] += time.perf_counter() - t0
        paused.append(fresh.stats.num_paused_steps)
        taus.append(round(fresh.stats.tau, 3))
    print(
        json.dumps(
            {
                "environment": environment(),
                "dtype": str(dtype).removeprefix("torch."),
                "draft": args.draft,
                "reps": args.reps,
                "max_new_tokens": args.max_new_tokens,
                "seconds": {k: round(v, 2) for k, v in seconds.items()},
                "speedup": round(seconds["ar"] / seconds["default"], 3),
                "paused_steps": paused,
                "tau_of_drafting_steps": taus,
            }
        )
    )


if __name__ == "__main__":
    main()
