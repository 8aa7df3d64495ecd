"""Continuous batching in one process, without HTTP: plain decoding against a drafter under the load policy.

Why: ``lilicorr bench serve`` measures whole servers, whose rounds drift with the machine; this drives the engine
itself as the server's loop does (requests join as rows finish, at most ``--concurrency`` running, temperatures 0 /
0.7 / 1 in turn) and alternates the two arms run by run, so a loss that belongs to the engine shows apart from one
that belongs to the server (session 46: at 32 running, 0.98x plain with no drafting step, while the page showed
0.90-0.93x). The OpenMP wait is the server's (no spin).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/engine_under_load.py --concurrency 32 --requests 64 --runs 4
"""

# ruff: noqa: E402  (the OpenMP choice must come before torch loads)
from __future__ import annotations

import os

os.environ.setdefault("GOMP_SPINCOUNT", "0")

import argparse
import json
import time

import torch

from lilicorr.data.chat import row_ids
from lilicorr.decoding.build import engine_from_speculative_config
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime

TEMPERATURES = (0.0, 0.7, 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--draft", default="models/smollm2-lilicorr-conv")
    ap.add_argument("--method", default="default")
    ap.add_argument("--file", default="data/prompts/eval-mt-bench-humaneval.jsonl")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--runs", type=int, default=4, help="runs of each arm, alternating plain/spec, spec/plain, …")
    args = ap.parse_args()
    torch.set_num_threads(2)
    dtype = resolve_dtype("auto")
    target = TargetRuntime.load(args.target, dtype=dtype)
    with open(args.file) as f:
        rows = [json.loads(line) for line in f]
    spec = engine_from_speculative_config(target, {"model": args.draft, "method": args.method}, dtype)
    spec.use_load_policy()
    engines = {"plain": engine_from_speculative_config(target, None, dtype), "spec": spec}
    rates: dict[str, list[float]] = {"plain": [], "spec": []}
    for run in range(args.runs):
        for name in ("plain", "spec") if run % 2 == 0 else ("spec", "plain"):
            engine = engines[name]
            waiting = [
                Request(
                    row_ids(target.tokenizer, rows[i % len(rows)]),
                    SamplingParams(max_tokens=args.max_tokens, temperature=TEMPERATURES[i % 3], seed=i),
                )
                for i in range(args.requests)
            ]
            requests, steps, drafting_before = list(waiting), 0, engine.stats.num_drafts
            t0 = time.perf_counter()
            while waiting or engine.seqs:
                free = args.concurrency - len(engine.seqs)
                if waiting and free > 0:
                    joining, waiting = waiting[:free], waiting[free:]
                    engine.add(joining)
                else:
                    engine.step()
                    steps += 1
            wall = time.perf_counter() - t0
            rate = sum(len(r.output_ids) for r in requests) / wall
            rates[name].append(rate)
            drafts = engine.stats.num_drafts - drafting_before
            print(f"{name} run {run}: {rate:.1f} tokens/s, {wall:.1f} s, {steps} steps, {drafts} row drafts")
    mean = {k: sum(v) / len(v) for k, v in rates.items()}
    print(f"mean: plain {mean['plain']:.1f}, spec {mean['spec']:.1f} tokens/s ({mean['spec'] / mean['plain']:.2f}x)")


if __name__ == "__main__":
    main()
